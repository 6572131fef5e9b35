// A hidden-states answer (raw bytes) ends with its last byte, not with its
// headers: its ledger row says how the body ended (a worker that dies
// mid-body is an error, a client that leaves is client_cancelled) and its
// duration and the route's duration histogram include the body's time.
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { startTestRouter, type RouterFixture } from "../helpers/router.ts";
import { waitFor } from "../helpers/env.ts";
import { HostileWorker, type HostileHandler } from "../security/hostile-worker.ts";

let fx: RouterFixture;
const workers: HostileWorker[] = [];
const BODY_GAP_MS = 400;

beforeAll(async () => {
  fx = await startTestRouter({ "deadlines.idleMs": 10_000 });
});

afterEach(async () => {
  await Promise.all(workers.splice(0).map((w) => w.stop()));
  await waitFor(() => fx.router.deps.directory.all().length === 0, { what: "registry empty" });
});

afterAll(async () => {
  await fx?.close();
});

async function worker(id: string, handler: HostileHandler): Promise<void> {
  workers.push(await new HostileWorker(id, fx.registry, handler).start());
  await waitFor(() => fx.router.deps.directory.all().some((r) => r.id === id), { what: `${id} visible` });
}

const post = (signal?: AbortSignal) =>
  fetch(`${fx.router.url}/v1/hidden_states`, {
    method: "POST",
    headers: { authorization: `Bearer ${fx.key}`, "content-type": "application/json" },
    body: JSON.stringify({ model: "m", input: "hello" }),
    ...(signal ? { signal } : {}),
  });

async function row(requestId: string) {
  return waitFor(async () => {
    await fx.router.deps.guard.flush();
    const [r] = await fx.db.sql`select status, duration_ms, prompt_tokens from spend_ledger where request_id = ${requestId}`;
    return r;
  }, { what: `ledger row of ${requestId}` });
}

/** The duration histogram's count and sum for the hidden-states route, from /metrics. */
async function durations(): Promise<{ count: number; sum: number }> {
  const text = await (await fetch(`${fx.router.adminUrl}/metrics`)).text();
  const pick = (suffix: string) => Number(text.match(new RegExp(`^switchyard_request_duration_seconds_${suffix}\\{route="/v1/hidden_states"\\} (\\S+)$`, "m"))?.[1] ?? 0);
  return { count: pick("count"), sum: pick("sum") };
}

/** switchyard_tokens_total{kind="prompt"}, from /metrics. */
async function promptTokens(): Promise<number> {
  const text = await (await fetch(`${fx.router.adminUrl}/metrics`)).text();
  return Number(text.match(/^switchyard_tokens_total\{kind="prompt"\} (\S+)$/m)?.[1] ?? 0);
}

/** The prompt tokens each of these answers says it computed (x-switchyard-tokens). */
const TOKENS = 37;

/** Headers and half the body at once, the rest after BODY_GAP_MS — or, with `die`, the connection cut instead. */
const slowBody = (die: boolean): HostileHandler => (_req, res) => {
  res.writeHead(200, { "content-type": "application/octet-stream", "x-switchyard-tokens": String(TOKENS) });
  res.write(Buffer.alloc(64 * 1024, 1));
  setTimeout(() => (die ? res.destroy() : res.end(Buffer.alloc(64 * 1024, 2))), BODY_GAP_MS);
};

describe("a hidden-states answer ends with its last byte", () => {
  it("a whole body: row ok, its duration and the histogram's include the body's time; its tokens are counted", async () => {
    await worker("hs-slow", slowBody(false));
    const before = await durations();
    const tokensBefore = await promptTokens();
    const res = await post();
    expect(res.status).toBe(200);
    expect((await res.arrayBuffer()).byteLength).toBe(128 * 1024);
    const r = await row(res.headers.get("x-request-id")!);
    expect(r).toMatchObject({ status: "ok", prompt_tokens: TOKENS });
    expect(Number(r!.duration_ms)).toBeGreaterThanOrEqual(BODY_GAP_MS - 20);
    const after = await waitFor(async () => {
      const d = await durations();
      return d.count === before.count + 1 ? d : undefined;
    }, { what: "one duration observed" });
    expect(after.sum - before.sum).toBeGreaterThanOrEqual((BODY_GAP_MS - 20) / 1000);
    // The prompt tokens the worker computed, as its ledger row counts them.
    expect((await promptTokens()) - tokensBefore).toBe(TOKENS);
  });

  it("a worker that dies mid-body: the row is an error, not ok", async () => {
    await worker("hs-dies", slowBody(true));
    const res = await post();
    expect(res.status).toBe(200);
    await expect(res.arrayBuffer()).rejects.toThrow();
    const r = await row(res.headers.get("x-request-id")!);
    expect(r).toMatchObject({ status: "error" });
    expect(Number(r!.duration_ms)).toBeGreaterThanOrEqual(BODY_GAP_MS - 20);
  });

  it("a client that leaves mid-body: client_cancelled", async () => {
    await worker("hs-left", slowBody(false));
    const ac = new AbortController();
    const res = await post(ac.signal);
    expect(res.status).toBe(200);
    const reader = res.body!.getReader();
    await reader.read();
    ac.abort();
    const r = await row(res.headers.get("x-request-id")!);
    expect(r).toMatchObject({ status: "client_cancelled" });
  });
});
