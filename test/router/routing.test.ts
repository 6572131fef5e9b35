// Routing through a real router and sim workers: the scorer learns which
// worker answers faster and explains itself; failing workers are ejected and
// come back; a stream broken mid-way is billed for what it delivered, or —
// when the request opts in — resumed on another worker as one stream.
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { SimWorker, type SimBehavior } from "#testkit/sim-worker";
import { startTestRouter, type RouterFixture } from "../helpers/router.ts";
import { waitFor } from "../helpers/env.ts";
import { PREFIX_NAME_FIELD } from "@switchyard/state";
import { CACHE_SCOPE_FIELD } from "../../apps/router/src/routing/request-class.ts";

let fx: RouterFixture;
const workers: SimWorker[] = [];

beforeAll(async () => {
  fx = await startTestRouter({
    "routing.scorer.epsilon": 0,
    "routing.scorer.minSamples": 3,
    "routing.health.baseEjectMs": 400,
    "deadlines.idleMs": 400,
    "deadlines.firstTokenMs": 1_000,
    "deadlines.headersMs": 1_000,
  });
});

afterEach(async () => {
  await Promise.all(workers.splice(0).map((w) => w.stop()));
  await waitFor(() => fx.router.deps.directory.all().length === 0, { what: "registry empty" });
});

afterAll(async () => {
  await fx?.close();
});

async function sim(id: string, behavior: Partial<SimBehavior>, opts: { model?: string; state?: "ready" | "degraded" } = {}): Promise<SimWorker> {
  const w = await new SimWorker({ id, models: [opts.model ?? "m"], registry: fx.registry, behavior, state: opts.state }).start();
  workers.push(w);
  return w;
}

const waitForWorkers = (n: number) => waitFor(() => fx.router.deps.directory.all().length === n, { what: `${n} workers visible` });

function post(body: Record<string, unknown>, headers: Record<string, string> = {}, path = "/v1/chat/completions") {
  return fetch(`${fx.router.url}${path}`, {
    method: "POST",
    headers: { authorization: `Bearer ${fx.key}`, "content-type": "application/json", ...headers },
    body: JSON.stringify({ model: "m", ...(path === "/v1/chat/completions" ? { messages: [{ role: "user", content: "count" }] } : { prompt: "count:" }), ...body }),
  });
}

async function payloads(res: Response): Promise<string[]> {
  return (await res.text())
    .split("\n\n")
    .filter((b) => b.startsWith("data: "))
    .map((b) => b.slice(6));
}

/** The text a client assembles from chat (delta.content) or completion (text) chunks. */
function assembled(events: string[]): string {
  let text = "";
  for (const e of events) {
    if (!e.startsWith("{")) continue;
    const p = JSON.parse(e) as { choices?: Array<{ delta?: { content?: string }; text?: string }> };
    const c = p.choices?.[0];
    text += c?.delta?.content ?? c?.text ?? "";
  }
  return text;
}

const fullText = (n: number) => Array.from({ length: n }, (_, i) => `tok${i} `).join("");

async function ledgerRow(requestId: string) {
  await fx.router.deps.guard.flush();
  const rows = await waitFor(async () => {
    const r = await fx.db.sql`select * from spend_ledger where request_id = ${requestId}`;
    return r.length ? r : undefined;
  });
  return rows[0]!;
}

describe("latency-aware scorer", () => {
  it("learns which worker answers first and sends the class there; explains the decision when asked", async () => {
    const fast = await sim("fast", { ttftMs: 5, tokens: 2 });
    const slow = await sim("slow", { ttftMs: 120, tokens: 2 });
    await waitForWorkers(2);
    // Learning: until a worker has minSamples (3) measurements it is assumed
    // as fast as its peers, so the slow one keeps getting turns until it has
    // been measured enough to be known slow.
    const slowServed = () => slow.served.get("/v1/chat/completions") ?? 0;
    for (let i = 0; i < 40 && (i < 12 || slowServed() < 3); i++) await (await post({ stream: true })).text();
    const before = { fast: fast.served.get("/v1/chat/completions") ?? 0, slow: slowServed() };
    expect(before.slow).toBeGreaterThanOrEqual(3); // it was measured, not just guessed at
    for (let i = 0; i < 10; i++) {
      const res = await post({ stream: true });
      await res.text();
      expect(res.headers.get("x-switchyard-backend")).toBe("worker:fast");
    }
    expect(slow.served.get("/v1/chat/completions")).toBe(before.slow);

    const explained = await post({ stream: true }, { "x-switchyard-debug": "route" });
    await explained.text();
    const route = explained.headers.get("x-switchyard-route")!;
    expect(route).toMatch(/^worker:fast score=\S+ p95=\S+ms\(n=\d+\) inflight=\d+\/64; worker:slow score=\S+ p95=(1\d\d|\d\d\d)ms\(n=\d+\)/);
    // Only when asked.
    const plain = await post({ stream: true });
    await plain.text();
    expect(plain.headers.get("x-switchyard-route")).toBeNull();
  });
});

describe("health: ejection and return", () => {
  it("a worker that resets connections is ejected at once, skipped while out, and back after it serves again", async () => {
    const good = await sim("good", { tokens: 2 });
    const flaky = await sim("flaky", { resetBeforeHeaders: true, tokens: 2 });
    await waitForWorkers(2);
    const health = fx.router.deps.directory.scorer.health!;
    const ejections0 = fx.router.deps.metrics.ejections.get({ reason: "unreachable" });
    await waitFor(async () => {
      const res = await post({});
      expect(res.status).toBe(200);
      await res.text();
      return health.isEjected("flaky");
    }, { what: "flaky ejected" });
    expect(fx.router.deps.metrics.ejections.get({ reason: "unreachable" })).toBe(ejections0 + 1);
    const tried = flaky.served.get("/v1/chat/completions") ?? 0;
    expect(fx.router.deps.directory.candidates("m").map((w) => w.id)).toEqual(["good"]);
    for (let i = 0; i < 5; i++) expect((await post({})).headers.get("x-switchyard-backend")).toBe("worker:good");
    expect(flaky.served.get("/v1/chat/completions") ?? 0).toBe(tried);

    // It heals; after the interval it is a candidate again, and a success clears its record.
    flaky.behavior.resetBeforeHeaders = false;
    await waitFor(() => !health.isEjected("flaky"), { timeoutMs: 2_000, what: "ejection over" });
    expect(fx.router.deps.directory.candidates("m").map((w) => w.id).sort()).toEqual(["flaky", "good"]);
    await good.stop();
    workers.splice(workers.indexOf(good), 1);
    await waitForWorkers(1);
    const res = await post({});
    expect(res.status).toBe(200);
    expect(res.headers.get("x-switchyard-backend")).toBe("worker:flaky");
    expect(health.view("flaky")).toMatchObject({ ejected: false, probation: false, consecutiveFailures: 0 });
  });
});

describe("a stream that breaks mid-way", () => {
  it("without opt-in: one error event, and the ledger row records what was delivered", async () => {
    await sim("dies", { dropAfterEvents: 4, tokens: 10 });
    await sim("spare", { tokens: 10 }, { state: "degraded" });
    await waitForWorkers(2);
    const res = await post({ stream: true });
    expect(res.headers.get("x-switchyard-backend")).toBe("worker:dies");
    const events = await payloads(res);
    expect(events.filter((e) => e.startsWith('{"error"'))).toHaveLength(1);
    expect(events).not.toContain("[DONE]");
    expect(assembled(events)).toBe(fullText(4));
    const row = await ledgerRow(res.headers.get("x-request-id")!);
    expect(row).toMatchObject({ status: "error", worker: "dies", completion_tokens: 4, cost_micro: "0", cost_source: "estimate" });
    expect(row.ttft_ms).not.toBeNull();
  });

  it("with x-switchyard-resume: true it continues on another worker — one stream, same id, nothing repeated", async () => {
    const dies = await sim("dies", { dropAfterEvents: 4, tokens: 10 });
    const spare = await sim("spare", { tokens: 10 }, { state: "degraded" });
    await waitForWorkers(2);
    const resumes0 = fx.router.deps.metrics.streamResumes.get({ outcome: "resumed" });
    const res = await post({ stream: true, max_tokens: 50, stream_options: { include_usage: true } }, { "x-switchyard-resume": "true" });
    expect(res.headers.get("x-switchyard-backend")).toBe("worker:dies");
    const events = await payloads(res);
    expect(events.filter((e) => e.startsWith('{"error"'))).toHaveLength(0);
    expect(events.at(-1)).toBe("[DONE]");
    expect(assembled(events)).toBe(fullText(10));
    const chunks = events.filter((e) => e.startsWith("{")).map((e) => JSON.parse(e) as { id: string; model: string; created: number; choices: Array<{ delta?: { role?: string } }>; usage?: { completion_tokens: number } });
    expect(new Set(chunks.map((c) => c.id)).size).toBe(1);
    expect(new Set(chunks.map((c) => c.created)).size).toBe(1);
    expect(chunks.filter((c) => c.choices[0]?.delta?.role !== undefined)).toHaveLength(1);
    expect(chunks.at(-1)!.usage!.completion_tokens).toBe(10);
    // What the spare was asked: the answer so far to continue, and the output left.
    expect(spare.lastBody).toMatchObject({ max_tokens: 46, continue_final_message: true });
    // Under the tenant's own prefix-cache scope, as the first worker was (a continuation unscoped would share cache entries across tenants).
    expect(typeof dies.lastBody![CACHE_SCOPE_FIELD]).toBe("string");
    expect(spare.lastBody![CACHE_SCOPE_FIELD]).toBe(dies.lastBody![CACHE_SCOPE_FIELD]);
    expect(spare.lastBody![PREFIX_NAME_FIELD]).toBe(dies.lastBody![PREFIX_NAME_FIELD]);
    expect((spare.lastBody!.messages as Array<{ role: string; content: string }>).at(-1)).toEqual({ role: "assistant", content: fullText(4) });
    expect(fx.router.deps.metrics.streamResumes.get({ outcome: "resumed" })).toBe(resumes0 + 1);
    const row = await ledgerRow(res.headers.get("x-request-id")!);
    expect(row).toMatchObject({ status: "ok", worker: "spare", completion_tokens: 10 });
  });

  it("resumes /v1/completions by extending the prompt; after a stall, and after a worker's own error event", async () => {
    await sim("stalls", { stallAfterEvents: 3, tokens: 8 });
    const spare = await sim("spare", { tokens: 8 }, { state: "degraded" });
    await waitForWorkers(2);
    const t0 = performance.now();
    const res = await post({ stream: true }, { "x-switchyard-resume": "true" }, "/v1/completions");
    const events = await payloads(res);
    expect(assembled(events)).toBe(fullText(8));
    expect(events.at(-1)).toBe("[DONE]");
    expect(spare.lastBody!.prompt).toBe(`count:${fullText(3)}`);
    expect(performance.now() - t0).toBeLessThan(2_000); // the idle deadline (400 ms) found the stall

    await Promise.all(workers.splice(0).map((w) => w.stop()));
    await waitForWorkers(0);
    await sim("engine-dies", { errorAfterTokens: 5, tokens: 9 });
    await sim("spare2", { tokens: 9 }, { state: "degraded" });
    await waitForWorkers(2);
    const again = await payloads(await post({ stream: true }, { "x-switchyard-resume": "true" }));
    expect(assembled(again)).toBe(fullText(9));
    expect(again.filter((e) => e.startsWith('{"error"'))).toHaveLength(0);
  });

  it("with nowhere to resume, still exactly one error event", async () => {
    await sim("alone", { dropAfterEvents: 3, tokens: 10 });
    await waitForWorkers(1);
    const events = await payloads(await post({ stream: true }, { "x-switchyard-resume": "true" }));
    expect(events.filter((e) => e.startsWith('{"error"'))).toHaveLength(1);
    expect(assembled(events)).toBe(fullText(3));
  });
});
