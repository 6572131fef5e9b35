// Rate limits on a real router (real Redis, real Postgres) in front of a sim
// worker: the official `openai` SDK's own retries succeed after Retry-After;
// tokens are reserved at the prompt's upper bound and corrected to the usage
// at settle; a key's limit is its own; the headers ride on error answers too.
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createKey, createTenant, setRateLimit } from "@switchyard/db";
import { SimWorker } from "#testkit/sim-worker";
import { startTestRouter, type RouterFixture } from "../helpers/router.ts";
import { sleep, waitFor } from "../helpers/env.ts";

const WINDOW_MS = 1_500;
let fx: RouterFixture;
let worker: SimWorker;

beforeAll(async () => {
  fx = await startTestRouter({ "rateLimits.windowMs": WINDOW_MS, "rateLimits.refreshMs": 0 });
  worker = await new SimWorker({ id: "rl-sim", models: ["sim-chat"], registry: fx.registry, behavior: { tokens: 4, promptTokens: 7 } }).start();
  await waitFor(() => fx.router.deps.directory.all().length === 1, { what: "worker registered" });
});

afterAll(async () => {
  await worker?.stop();
  await fx?.close();
});

async function tenantWithKey(name: string): Promise<{ tenantId: number; key: string; prefix: string }> {
  const t = await createTenant(fx.db.db, name);
  if (!t.ok) throw new Error("tenant");
  const k = await createKey(fx.db.db, t.tenant.id);
  return { tenantId: t.tenant.id, key: k.key, prefix: k.row.prefix };
}

const chat = (key: string, body: Record<string, unknown> = {}) =>
  fetch(`${fx.router.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: JSON.stringify({ model: "sim-chat", messages: [{ role: "user", content: "hi" }], ...body }),
  });

describe("rate limits on one router", () => {
  it("the openai SDK's retries succeed after Retry-After", async () => {
    const t = await tenantWithKey("sdk-retries");
    await setRateLimit(fx.db.db, { tenantId: t.tenantId, requestsPerMinute: 2 });
    const statuses: number[] = [];
    const client = new OpenAI({
      apiKey: t.key,
      baseURL: `${fx.router.url}/v1`,
      maxRetries: 4,
      fetch: async (url, init) => {
        const res = await fetch(url, init);
        statuses.push(res.status);
        return res;
      },
    });
    const t0 = Date.now();
    for (let i = 0; i < 5; i++) {
      const res = await client.chat.completions.create({ model: "sim-chat", messages: [{ role: "user", content: `n${i}` }] });
      expect(res.choices[0]?.message.content).toBe("tok0 tok1 tok2 tok3 ");
    }
    // 5 requests at 2 per 1.5 s: the SDK met 429s and waited them out (retry-after-ms, not its own backoff).
    expect(statuses.filter((s) => s === 200)).toHaveLength(5);
    expect(statuses.filter((s) => s === 429).length).toBeGreaterThanOrEqual(1);
    expect(statuses.every((s) => s === 200 || s === 429)).toBe(true);
    expect(Date.now() - t0).toBeGreaterThanOrEqual(WINDOW_MS);
  }, 30_000);

  it("a 429 says when to come back, in seconds and milliseconds, with OpenAI's headers", async () => {
    const t = await tenantWithKey("retry-after");
    await setRateLimit(fx.db.db, { tenantId: t.tenantId, requestsPerMinute: 1, tokensPerMinute: 1000 });
    const ok = await chat(t.key);
    expect(ok.status).toBe(200);
    await ok.text();
    expect(ok.headers.get("x-ratelimit-limit-requests")).toBe("1");
    expect(ok.headers.get("x-ratelimit-remaining-requests")).toBe("0");
    expect(ok.headers.get("x-ratelimit-limit-tokens")).toBe("1000");
    expect(Number(ok.headers.get("x-ratelimit-remaining-tokens"))).toBeLessThan(1000);
    const refused = await chat(t.key);
    expect(refused.status).toBe(429);
    const ms = Number(refused.headers.get("retry-after-ms"));
    expect(ms).toBeGreaterThan(0);
    expect(ms).toBeLessThanOrEqual(WINDOW_MS);
    expect(refused.headers.get("retry-after")).toBe(String(Math.ceil(ms / 1000)));
    expect(refused.headers.get("x-ratelimit-reset-requests")).toMatch(/^(\d+ms|[\d.]+s)$/);
    expect(((await refused.json()) as { error: { code: string } }).error.code).toBe("rate_limit_exceeded");
    await sleep(ms + 50);
    const again = await chat(t.key);
    expect(again.status).toBe(200);
    await again.text();
  });

  it("tokens: the prompt's upper bound is reserved, then corrected to the usage at settle", async () => {
    const t = await tenantWithKey("tokens");
    // "hi" is bounded at 16 + 8 + 2 = 26 tokens; the sim worker reports 7 prompt + 4 completion = 11.
    await setRateLimit(fx.db.db, { tenantId: t.tenantId, tokensPerMinute: 60 });
    const first = await chat(t.key);
    expect(first.status).toBe(200);
    await first.text();
    expect(first.headers.get("x-ratelimit-remaining-tokens")).toBe(String(60 - 26));
    expect(first.headers.get("x-ratelimit-limit-requests")).toBeNull(); // no requests limit: no requests trio
    await sleep(50);
    // Uncorrected, the third would be refused (3 × 26 > 60); corrected, four fit (3 × 11 + 26 = 59).
    const remaining: string[] = [];
    for (let i = 0; i < 3; i++) {
      const r = await chat(t.key, { stream: i === 1 });
      expect(r.status).toBe(200);
      await r.text();
      remaining.push(r.headers.get("x-ratelimit-remaining-tokens")!);
      await sleep(50);
    }
    expect(remaining).toEqual([String(60 - 11 - 26), String(60 - 22 - 26), String(60 - 33 - 26)]);
    const over = await chat(t.key);
    expect(over.status).toBe(429);
    expect(((await over.json()) as { error: { message: string } }).error.message).toContain("tokens");
    // A prompt larger than the whole limit never fits: no retry.
    await sleep(WINDOW_MS + 100);
    const huge = await chat(t.key, { messages: [{ role: "user", content: "x".repeat(200) }] });
    expect(huge.status).toBe(429);
    expect(huge.headers.get("x-should-retry")).toBe("false");
    expect(huge.headers.get("retry-after")).toBeNull();
  });

  it("a key's own limit binds only that key; the tenant's binds all its keys", async () => {
    const t = await tenantWithKey("keyed");
    const other = await createKey(fx.db.db, t.tenantId);
    await setRateLimit(fx.db.db, { tenantId: t.tenantId, keyPrefix: t.prefix, requestsPerMinute: 1 });
    await setRateLimit(fx.db.db, { tenantId: t.tenantId, requestsPerMinute: 3 });
    expect((await chat(t.key)).status).toBe(200);
    const second = await chat(t.key);
    expect(second.status).toBe(429);
    expect(((await second.json()) as { error: { message: string } }).error.message).toContain(t.prefix);
    const a = await chat(other.key);
    expect(a.status).toBe(200);
    // The tenant-wide row is the binding one for the other key (2 of 3 used): remaining 1.
    expect(a.headers.get("x-ratelimit-remaining-requests")).toBe("1");
    expect((await chat(other.key)).status).toBe(200);
    const third = await chat(other.key);
    expect(third.status).toBe(429);
    expect(((await third.json()) as { error: { message: string } }).error.message).toContain("tenant keyed");
  });

  it("the headers ride on error answers after the check, and tenants without limits get none", async () => {
    const t = await tenantWithKey("errors");
    await setRateLimit(fx.db.db, { tenantId: t.tenantId, requestsPerMinute: 50 });
    const missing = await chat(t.key, { model: "no-such-model" });
    expect(missing.status).toBe(404);
    expect(missing.headers.get("x-ratelimit-limit-requests")).toBe("50");
    expect(missing.headers.get("x-ratelimit-remaining-requests")).toBe("49");
    const free = await chat(fx.key);
    expect(free.status).toBe(200);
    await free.text();
    expect(free.headers.get("x-ratelimit-limit-requests")).toBeNull();
  });
});
