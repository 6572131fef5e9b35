// Prefix-aware routing with the real engine: requests that share a long
// system prompt go to the worker whose engine already holds that prefix's
// keys and values, and each reuses them (usage.prompt_tokens_details). With
// affinity off the same requests spread and recompute the prefix. Names are
// per tenant: another tenant's identical prompt shows no affinity.
import { afterAll, describe, expect, it } from "vitest";
import type { AgentHandle } from "@switchyard/agent";
import { createKey, createTenant } from "@switchyard/db";
import { prefixKey } from "@switchyard/state";
import { waitFor } from "../helpers/env.ts";
import { startTestRouter, type RouterFixture } from "../helpers/router.ts";
import { startTestWorker, WORKER_TOKEN } from "../helpers/worker.ts";

const LLM = "smollm2-135m-instruct";
const system = {
  role: "system",
  content:
    "You are the assistant of a hardware store. Answer in one short sentence, name the aisle where the item is, say whether it is in stock, and never invent products the store does not sell. Opening hours are 8 to 18 on weekdays.",
};
const questions = ["Where are the hammers?", "Do you sell garden hoses?", "Where is the paint?", "Do you have ladders?", "Where are the screws?", "Do you sell lamps?"];

const fixtures: RouterFixture[] = [];
const agents: AgentHandle[] = [];

afterAll(async () => {
  await Promise.all(agents.map((a) => a.stop()));
  await Promise.all(fixtures.map((f) => f.close()));
});

async function ask(fx: RouterFixture, question: string, key = fx.key): Promise<{ worker: string; cached: number; prompt: number; route: string }> {
  const res = await fetch(`${fx.router.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json", "x-switchyard-debug": "route" },
    body: JSON.stringify({ model: LLM, messages: [system, { role: "user", content: question }], temperature: 0, max_tokens: 2 }),
  });
  expect(res.status).toBe(200);
  const body = (await res.json()) as { usage: { prompt_tokens: number; prompt_tokens_details?: { cached_tokens?: number } } };
  return {
    worker: res.headers.get("x-switchyard-backend")!,
    cached: body.usage.prompt_tokens_details?.cached_tokens ?? 0,
    prompt: body.usage.prompt_tokens,
    route: res.headers.get("x-switchyard-route") ?? "",
  };
}

async function twoWorkers(affinity: number, ids: [string, string]) {
  const fx = await startTestRouter({ "workers.token": WORKER_TOKEN, "routing.scorer.epsilon": 0, "routing.scorer.prefixAffinity": affinity });
  fixtures.push(fx);
  for (const id of ids) agents.push(await startTestWorker(fx, { id, models: [LLM] }));
  return fx;
}

describe("prefix-aware routing (real engine)", () => {
  it("keeps a shared system prompt on the worker that caches it", async () => {
    const fx = await twoWorkers(0.5, ["pa-1", "pa-2"]);
    const first = await ask(fx, questions[0]!);
    expect(first.cached).toBe(0);
    for (const q of questions.slice(1)) {
      const r = await ask(fx, q);
      expect(r.worker).toBe(first.worker);
      // The system prompt and the chat markers before the question.
      expect(r.cached).toBeGreaterThan(30);
      expect(r.cached).toBeLessThan(r.prompt);
    }
  }, 120_000);

  it("another router follows the prefixes workers advertise in their heartbeats", async () => {
    const fx = await twoWorkers(0.5, ["pc-1", "pc-2"]);
    const first = await ask(fx, questions[0]!);
    const key = prefixKey("/v1/chat/completions", { messages: [system] }, String(fx.tenantId))!;
    const holder = agents.find((a) => `worker:${a.id}` === first.worker)!;
    expect((await holder.record()).prefixes).toContain(key);
    // A router that has never seen this prompt, on the same registry.
    const other = await startTestRouter({ "workers.token": WORKER_TOKEN, "routing.scorer.epsilon": 0, "redis.keyPrefix": fx.redis.prefix });
    fixtures.push(other);
    await waitFor(() => other.router.deps.directory.all().some((w) => `worker:${w.id}` === first.worker && w.prefixes.includes(key)), { timeoutMs: 5000, what: "advertised prefix" });
    for (const q of questions.slice(1, 4)) {
      const r = await ask(other, q);
      expect(r.worker).toBe(first.worker);
      expect(r.cached).toBeGreaterThan(30);
    }
  }, 120_000);

  it("is per tenant: another tenant sending the same prompt sees no affinity, from memory or heartbeats; the first tenant's follow-ups keep it", async () => {
    const fx = await twoWorkers(0.5, ["pt-1", "pt-2"]);
    // The fixture's own tenant plays beta; alpha is a second tenant with the same prompt.
    const t = await createTenant(fx.db.db, "alpha");
    if (!t.ok) throw new Error("tenant alpha");
    const alphaKey = (await createKey(fx.db.db, t.tenant.id)).key;
    const beta = await ask(fx, questions[0]!);
    const holder = agents.find((a) => `worker:${a.id}` === beta.worker)!;
    const betaName = prefixKey("/v1/chat/completions", { messages: [system] }, String(fx.tenantId))!;
    const alphaName = prefixKey("/v1/chat/completions", { messages: [system] }, String(t.tenant.id))!;
    expect(alphaName).not.toBe(betaName);
    expect((await holder.record()).prefixes).toEqual([betaName]);
    await waitFor(() => fx.router.deps.directory.all().some((w) => w.prefixes.includes(betaName)), { timeoutMs: 5000, what: "beta's prefix advertised" });

    const alpha = await ask(fx, questions[0]!, alphaKey);
    expect(alpha.route).toContain("worker:");
    expect(alpha.route).not.toContain("prefix");
    // What alpha's worker advertises now is alpha's own name, which beta's requests never match.
    expect((await agents.find((a) => `worker:${a.id}` === alpha.worker)!.record()).prefixes).toContain(alphaName);

    const again = await ask(fx, questions[1]!);
    expect(again.worker).toBe(beta.worker);
    expect(again.route.split("; ").find((p) => p.startsWith(`${beta.worker} `))).toContain("prefix");
    expect(again.cached).toBeGreaterThan(30);
  }, 120_000);

  it("a worker whose engine keeps no prefix cache advertises none", async () => {
    process.env.SWITCHYARD_PREFIX_CACHE_MB = "0";
    let fx: RouterFixture;
    try {
      fx = await startTestRouter({ "workers.token": WORKER_TOKEN, "routing.scorer.epsilon": 0 });
      fixtures.push(fx);
      agents.push(await startTestWorker(fx, { id: "pd-1", models: [LLM] }));
    } finally {
      delete process.env.SWITCHYARD_PREFIX_CACHE_MB;
    }
    await ask(fx, questions[0]!);
    const again = await ask(fx, questions[1]!);
    expect(again.cached).toBe(0);
    expect((await agents.at(-1)!.record()).prefixes).toEqual([]);
  }, 120_000);

  it("without affinity the same requests spread, and each worker recomputes the prefix at its first one", async () => {
    const fx = await twoWorkers(1, ["pb-1", "pb-2"]);
    // Equal scores break ties at random: ask until both have served (the
    // chance that 30 tries all land on one worker is 2^-29).
    const served: Awaited<ReturnType<typeof ask>>[] = [];
    for (let i = 0; i < 30 && new Set(served.map((r) => r.worker)).size < 2; i++) served.push(await ask(fx, questions[i % questions.length]!));
    const workers = new Set(served.map((r) => r.worker));
    expect(workers.size).toBe(2);
    for (const w of workers) expect(served.find((r) => r.worker === w)!.cached).toBe(0);
  }, 120_000);
});
