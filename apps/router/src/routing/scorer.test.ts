import { describe, expect, it } from "vitest";
import { PREFIX_NAME_FIELD, prefixKey, routerPrefixName, type WorkerRecord } from "@switchyard/state";
import type { Backend } from "../backends/types.ts";
import { StaticPriceBook } from "../billing/prices.ts";
import { RouterMetrics } from "../observability/metrics.ts";
import { WorkerHealth } from "./health.ts";
import { CACHE_SCOPE_FIELD, cacheScope, requestClass } from "./request-class.ts";
import { defaultScorerConfig, explainRanking, promoteFree, RouteScorer, withPrefixName, type ScorerConfig, type Score } from "./scorer.ts";
import { configSchema } from "../config.ts";

const cls = requestClass("/v1/chat/completions", { stream: true, messages: [{ role: "user", content: "hi" }] });

function worker(id: string, over: Partial<WorkerRecord> = {}): WorkerRecord {
  return { id, url: `http://127.0.0.1:1/${id}`, models: ["m"], state: "ready", inFlight: 0, queueDepth: 0, capacity: 8, device: "sim", layerRanges: [], prefixes: [], version: "1", startedAt: 1, updatedAt: 1, ...over };
}

function setup(over: Partial<ScorerConfig> = {}, opts: { now?: () => number; random?: () => number; health?: WorkerHealth; prices?: StaticPriceBook; metrics?: RouterMetrics } = {}) {
  let t = 1_000;
  const now = opts.now ?? (() => t);
  const scorer = new RouteScorer({ ...defaultScorerConfig(), epsilon: 0, ...over }, { now, random: opts.random ?? (() => 0.5), ...opts });
  const samples = (id: string, ms: number, n = 10, c = cls) => {
    for (let i = 0; i < n; i++) scorer.record({ id: `worker:${id}` }, c, { outcome: "ok", ttftMs: ms, durationMs: ms * 2 });
  };
  return { scorer, samples, advance: (ms: number) => (t += ms) };
}

const order = (r: { item: WorkerRecord }[]) => r.map((x) => x.item.id);

describe("request classes", () => {
  it("are route × stream × prompt-size bucket", () => {
    expect(cls.key).toBe("chat|stream|s");
    expect(requestClass("/v1/completions", { prompt: "x".repeat(5_000) }).key).toBe("cmpl|whole|m");
    expect(requestClass("/v1/embeddings", { input: "x".repeat(40_000) }).key).toBe("emb|whole|xl");
    expect(requestClass("/v1/chat/completions", { messages: [], max_tokens: 12 }).maxOutput).toBe(12);
  });
});

describe("RouteScorer", () => {
  it("puts the backend with the lower p95 for this class first", () => {
    const { scorer, samples } = setup();
    samples("slow", 400);
    samples("fast", 40);
    expect(order(scorer.rankWorkers([worker("slow"), worker("fast")], cls, "m"))).toEqual(["fast", "slow"]);
    // Another class knows nothing yet: equal priors, load decides (both idle: either order).
    const other = requestClass("/v1/completions", { prompt: "hi" });
    samples("slow", 10, 10, other);
    samples("fast", 500, 10, other);
    expect(order(scorer.rankWorkers([worker("slow"), worker("fast")], other, "m"))).toEqual(["slow", "fast"]);
  });

  it("streams are scored on time to first token, whole answers on duration", () => {
    const { scorer } = setup();
    const whole = requestClass("/v1/chat/completions", { messages: [] });
    for (let i = 0; i < 10; i++) {
      scorer.record({ id: "worker:a" }, whole, { outcome: "ok", durationMs: 300 });
      scorer.record({ id: "worker:b" }, whole, { outcome: "ok", durationMs: 30 });
    }
    const [first] = scorer.rankWorkers([worker("a"), worker("b")], whole, "m");
    expect(first!.item.id).toBe("b");
    expect(first!.score.p95Ms).toBe(30);
  });

  it("weighs load: heartbeat in-flight and queue, and this router's own attempts", () => {
    const { scorer, samples } = setup();
    samples("a", 100);
    samples("b", 100);
    expect(order(scorer.rankWorkers([worker("a", { inFlight: 8 }), worker("b")], cls, "m"))).toEqual(["b", "a"]);
    expect(order(scorer.rankWorkers([worker("a"), worker("b", { queueDepth: 4 })], cls, "m"))).toEqual(["a", "b"]);
    // The heartbeat says idle, but this router just sent b three requests.
    const backend = { id: "worker:b", workerId: "b", paid: false } as Backend;
    const ends = [scorer.begin(backend, cls), scorer.begin(backend, cls), scorer.begin(backend, cls)];
    const ranked = scorer.rankWorkers([worker("a"), worker("b")], cls, "m");
    expect(order(ranked)).toEqual(["a", "b"]);
    expect(ranked[1]!.score.inFlight).toBe(3);
    for (const end of ends) end({ outcome: "ok", ttftMs: 100, durationMs: 100 });
    // A reporter counts once: a second call changes nothing.
    ends[0]!({ outcome: "ok", durationMs: 1 });
    expect(scorer.inFlight("worker:b")).toBe(0);
  });

  it("puts a worker with a free slot before a full one, whatever their p95s (the full one would queue the request); among full ones the score decides", () => {
    const { scorer, samples } = setup();
    samples("fast", 100);
    samples("slow", 300);
    expect(order(scorer.rankWorkers([worker("fast", { inFlight: 8 }), worker("slow", { inFlight: 2 })], cls, "m"))).toEqual(["slow", "fast"]);
    expect(order(scorer.rankWorkers([worker("fast", { inFlight: 6, queueDepth: 2 }), worker("slow")], cls, "m"))).toEqual(["slow", "fast"]);
    expect(order(scorer.rankWorkers([worker("fast", { inFlight: 8 }), worker("slow", { inFlight: 8 })], cls, "m"))).toEqual(["fast", "slow"]);
    // With room on both, a lower p95 still outweighs load.
    expect(order(scorer.rankWorkers([worker("fast", { inFlight: 6 }), worker("slow")], cls, "m"))).toEqual(["fast", "slow"]);
  });

  it("weighs recent failures", () => {
    const { scorer, samples } = setup();
    samples("a", 100);
    samples("b", 100);
    scorer.record({ id: "worker:a" }, cls, { outcome: "failed", durationMs: 5, failure: "bad_status" });
    const ranked = scorer.rankWorkers([worker("a"), worker("b")], cls, "m");
    expect(order(ranked)).toEqual(["b", "a"]);
    expect(ranked[1]!.score.failureRate).toBeGreaterThan(0);
  });

  it("a new backend borrows the median p95 of its measured peers until it has minSamples", () => {
    const { scorer, samples } = setup({ minSamples: 5 });
    samples("a", 100);
    samples("b", 300);
    samples("c", 200);
    samples("new", 1, 4); // not enough yet
    const ranked = scorer.rankWorkers([worker("a"), worker("b"), worker("c"), worker("new")], cls, "m");
    const fresh = ranked.find((r) => r.item.id === "new")!.score;
    expect(fresh.samples).toBe(0);
    expect(fresh.p95Ms).toBe(200);
  });

  it("forgets samples older than the window (bounded, time-decayed)", () => {
    const { scorer, samples, advance } = setup({ windowMs: 1_000, windowSize: 16 });
    samples("a", 500, 100); // 100 samples into a ring of 16
    samples("b", 100);
    expect(order(scorer.rankWorkers([worker("a"), worker("b")], cls, "m"))).toEqual(["b", "a"]);
    advance(2_000);
    samples("b", 100);
    // a's samples aged out: it gets b's p95 as its prior, a fair second chance.
    const ranked = scorer.rankWorkers([worker("a"), worker("b")], cls, "m");
    expect(ranked.find((r) => r.item.id === "a")!.score.samples).toBe(0);
  });

  it("keeps degraded workers last, drops ejected ones unless all are ejected", () => {
    let t = 0;
    const health = new WorkerHealth(configSchema.parse({}).routing.health, { now: () => t });
    const { scorer, samples } = setup({}, { health });
    samples("cpu", 1);
    samples("gpu", 100);
    expect(order(scorer.rankWorkers([worker("cpu", { state: "degraded" }), worker("gpu")], cls, "m"))).toEqual(["gpu", "cpu"]);
    health.record("gpu", "failed", "connect");
    expect(order(scorer.rankWorkers([worker("a"), worker("gpu")], cls, "m"))).toEqual(["a"]);
    const panic = scorer.rankWorkers([worker("gpu")], cls, "m");
    expect(order(panic)).toEqual(["gpu"]);
    expect(panic[0]!.score.ejected).toBe(true);
    t += 5_000;
    expect(order(scorer.rankWorkers([worker("a"), worker("gpu")], cls, "m"))).toContain("gpu");
  });

  it("explores: with probability epsilon another healthy candidate goes first, and says so", () => {
    const metrics = new RouterMetrics();
    const rolls = [0.99, 0.99, 0.01, 0.99]; // shuffle, shuffle, explore?, which
    let i = 0;
    const { scorer, samples } = setup({ epsilon: 0.05 }, { random: () => rolls[i++ % rolls.length]!, metrics });
    samples("a", 10);
    samples("b", 100);
    samples("c", 1_000);
    const ranked = scorer.rankWorkers([worker("a"), worker("b"), worker("c")], cls, "m");
    expect(ranked[0]!.score.explored).toBe(true);
    expect(ranked[0]!.item.id).not.toBe("a");
    expect(metrics.routeExplorations.get()).toBe(1);
    expect(explainRanking(ranked.map((r) => r.score))).toMatch(/^worker:\w+ score=\S+ p95=\S+ms\(n=10\) inflight=0\/8 explore; worker:a /);
  });

  it("round_robin mode rotates whatever the latency", () => {
    const { scorer, samples } = setup({ mode: "round_robin" });
    samples("a", 1);
    samples("b", 1_000);
    const firsts = Array.from({ length: 4 }, () => scorer.rankWorkers([worker("a"), worker("b")], cls, "m")[0]!.item.id);
    expect(firsts).toEqual(["a", "b", "a", "b"]);
    // A look that routes nothing (directory.candidates, /v1/models) takes no turn.
    expect(scorer.rankWorkers([worker("a"), worker("b")], cls, "m", false)[0]!.item.id).toBe("a");
    expect(scorer.rankWorkers([worker("a"), worker("b")], cls, "m")[0]!.item.id).toBe("a");
  });

  it("penalises paid backends by their expected cost", () => {
    const prices = new StaticPriceBook([{ backend: "openrouter", model: "x/y", inputMicroPerMtok: 100_000_000n, outputMicroPerMtok: 400_000_000n }]);
    const { scorer } = setup({ costMsPerCent: 1_000, expectedOutputTokens: 100 }, { prices });
    const paid = { id: "openrouter:x/y", kind: "openrouter", model: "x/y", paid: true } as Backend;
    const s = scorer.scoreBackend(paid, requestClass("/v1/chat/completions", { messages: [], max_tokens: 100 }));
    // 100 output tokens × 400 000 000 micro-cents per Mtok = 40 000 micro = 0.04 cents (+ the prompt's share).
    expect(s.costCents).toBeGreaterThan(0.04);
    expect(s.score).toBeGreaterThan(s.p95Ms + 40);
  });

  it("prices a prompt over a long-context threshold at the tier", () => {
    const flat = { inputMicroPerMtok: 100_000_000n, outputMicroPerMtok: 400_000_000n };
    const costOf = (threshold: number) => {
      const prices = new StaticPriceBook([{ backend: "openrouter", model: "x/y", ...flat, longContext: { thresholdTokens: threshold, inputMicroPerMtok: 1_000_000_000n, outputMicroPerMtok: 4_000_000_000n } }]);
      const { scorer } = setup({ costMsPerCent: 1_000, expectedOutputTokens: 100 }, { prices });
      const paid = { id: "openrouter:x/y", kind: "openrouter", model: "x/y", paid: true } as Backend;
      const c = requestClass("/v1/chat/completions", { messages: [{ role: "user", content: "hello" }], max_tokens: 100 });
      return { cents: scorer.scoreBackend(paid, c).costCents, prompt: c.promptTokens };
    };
    const { prompt, cents: under } = costOf(1_000_000);
    // Over the threshold: 10× the rates, 10× the cost.
    expect(costOf(prompt - 1).cents).toBeCloseTo(10 * under, 9);
    expect(costOf(prompt).cents).toBe(under);
  });

  it("prices an Anthropic prompt at its tier only when the request carries the 1M beta (Anthropic refuses a longer prompt without)", () => {
    const flat = { inputMicroPerMtok: 100_000_000n, outputMicroPerMtok: 400_000_000n };
    const prices = new StaticPriceBook([{ backend: "anthropic", model: "claude-x", ...flat, longContext: { thresholdTokens: 1, inputMicroPerMtok: 1_000_000_000n, outputMicroPerMtok: 4_000_000_000n } }]);
    const { scorer } = setup({ costMsPerCent: 1_000, expectedOutputTokens: 100 }, { prices });
    const paid = { id: "anthropic:claude-x", kind: "anthropic", model: "claude-x", paid: true } as Backend;
    const body = { messages: [{ role: "user", content: "hello" }], max_tokens: 100 };
    const without = scorer.scoreBackend(paid, requestClass("/v1/chat/completions", body)).costCents;
    const withBeta = scorer.scoreBackend(paid, requestClass("/v1/chat/completions", body, undefined, undefined, true)).costCents;
    expect(withBeta).toBeCloseTo(10 * without, 9);
  });

  it("drops statistics of workers that left", () => {
    const { scorer, samples } = setup();
    samples("gone", 5);
    samples("here", 500);
    scorer.retainWorkers(new Set(["here"]));
    const ranked = scorer.rankWorkers([worker("gone"), worker("here")], cls, "m");
    expect(ranked.find((r) => r.item.id === "gone")!.score.samples).toBe(0);
  });
});

describe("promoteFree", () => {
  const score = (id: string, value: number, paid: boolean): { score: Score } => ({
    score: { id, score: value, p95Ms: value, samples: 1, inFlight: 0, queued: 0, failureRate: 0, costCents: paid ? 1 : 0, paid, degraded: false, ejected: false, explored: false },
  });
  const ids = (xs: { score: Score }[]) => xs.map((x) => x.score.id);

  it("moves a comparable free backend ahead of a paid one, never the reverse", () => {
    expect(ids(promoteFree([score("paid", 100, true), score("free", 140, false)], 1.5))).toEqual(["free", "paid"]);
    expect(ids(promoteFree([score("paid", 100, true), score("free", 400, false)], 1.5))).toEqual(["paid", "free"]);
    expect(ids(promoteFree([score("free", 900, false), score("paid", 1, true)], 1.5))).toEqual(["free", "paid"]);
    expect(ids(promoteFree([score("p1", 100, true), score("p2", 90, true), score("f", 120, false)], 1.5))).toEqual(["f", "p1", "p2"]);
  });
});

describe("prefix affinity", () => {
  const system = { role: "system", content: "You are the support assistant of a hardware store. ".repeat(6) };
  // Tenant "1" unless said otherwise: prefix names are per tenant.
  const ask = (q: string, model = "m", tenant = "1") => requestClass("/v1/chat/completions", { model, stream: true, messages: [system, { role: "user", content: q }] }, tenant);

  it("names a request by its long first message, not by short ones", () => {
    expect(ask("a?").prefixKey).toBeDefined();
    expect(ask("a?").prefixKey).toBe(ask("something else entirely?").prefixKey);
    expect(requestClass("/v1/chat/completions", { model: "m", messages: [{ role: "system", content: "z".repeat(150) }] }, "1").prefixKey).not.toBe(ask("a?").prefixKey);
    expect(cls.prefixKey).toBeUndefined();
    expect(requestClass("/v1/completions", { model: "m", prompt: "x".repeat(300) }, "1").prefixKey).toBeDefined();
    expect(requestClass("/v1/completions", { model: "m", prompt: "x".repeat(99) }, "1").prefixKey).toBeUndefined();
    // No tenant, no name.
    expect(requestClass("/v1/completions", { model: "m", prompt: "x".repeat(300) }).prefixKey).toBeUndefined();
  });

  it("names the same prompt differently for each tenant", () => {
    expect(ask("a?", "m", "2").prefixKey).toBeDefined();
    expect(ask("a?", "m", "2").prefixKey).not.toBe(ask("a?", "m", "1").prefixKey);
    // The scope's length is part of the name: tenant "1" + text never collides with tenant "1x" + shifted text.
    expect(prefixKey("/v1/completions", { prompt: "x".repeat(300) }, "1")).not.toBe(prefixKey("/v1/completions", { prompt: "x".repeat(300) }, "11"));
  });

  it("another tenant's identical prompt gets no affinity and no 'prefix' in the explanation, from memory or heartbeats", () => {
    const { scorer } = setup();
    const workers = [worker("a"), worker("b", { prefixes: [ask("q", "m", "beta").prefixKey!] }), worker("c")];
    scorer.record({ id: "worker:c" }, ask("Where are the hammers?", "m", "beta"), { outcome: "ok", ttftMs: 50, durationMs: 80 });
    const forAlpha = scorer.rankWorkers(workers, ask("Where are the hammers?", "m", "alpha"), "m");
    expect(forAlpha.every((r) => !r.score.affinity)).toBe(true);
    expect(explainRanking(forAlpha.map((r) => r.score))).not.toContain("prefix");
    // Beta's own follow-up still has it (both its memory and the heartbeat point somewhere).
    const forBeta = scorer.rankWorkers(workers, ask("Do you sell hoses?", "m", "beta"), "m");
    expect(forBeta.filter((r) => r.score.affinity).map((r) => r.item.id).sort()).toEqual(["b", "c"]);
  });

  it("a worker attempt carries the request's prefix name and cache scope (null when none), over the client's; a paid attempt carries nothing", () => {
    const named = ask("q");
    expect(withPrefixName({ ok: true }, { workerId: "w" }, named)).toEqual({ ok: true, patch: { [PREFIX_NAME_FIELD]: named.prefixKey, [CACHE_SCOPE_FIELD]: cacheScope("1") } });
    expect(withPrefixName({ ok: true, patch: { max_tokens: 5 } }, { workerId: "w" }, cls)).toEqual({ ok: true, patch: { max_tokens: 5, [PREFIX_NAME_FIELD]: null, [CACHE_SCOPE_FIELD]: null } });
    // The cache scope is the tenant's, whatever the prompt; opaque and unrelated between tenants.
    expect(ask("another question").cacheScope).toBe(named.cacheScope);
    expect(ask("q", "m", "2").cacheScope).not.toBe(named.cacheScope);
    expect(named.cacheScope).toMatch(/^[A-Za-z0-9_-]{22}$/);
    expect(withPrefixName({ ok: true }, {}, named)).toEqual({ ok: true });
    expect(withPrefixName({ ok: false, reason: "unpriced" }, { workerId: "w" }, named)).toEqual({ ok: false, reason: "unpriced" });
    // The worker takes only a well-formed name.
    expect(routerPrefixName({ [PREFIX_NAME_FIELD]: named.prefixKey })).toBe(named.prefixKey);
    expect(routerPrefixName({ [PREFIX_NAME_FIELD]: null })).toBeUndefined();
    expect(routerPrefixName({ [PREFIX_NAME_FIELD]: "x".repeat(65) })).toBeUndefined();
    expect(routerPrefixName({ [PREFIX_NAME_FIELD]: "has spaces in it, not a name" })).toBeUndefined();
  });

  it("sends a request to the worker that last served its prefix, while that worker has room", () => {
    const { scorer } = setup();
    const workers = [worker("a"), worker("b"), worker("c")];
    scorer.record({ id: "worker:b" }, ask("Where are the hammers?"), { outcome: "ok", ttftMs: 50, durationMs: 80 });
    const ranked = scorer.rankWorkers(workers, ask("Do you sell hoses?"), "m");
    expect(ranked[0]!.item.id).toBe("b");
    expect(ranked[0]!.score.affinity).toBe(true);
    expect(explainRanking(ranked.map((r) => r.score))).toContain("prefix");
    // Another prefix: no preference from it.
    const other = requestClass("/v1/chat/completions", { model: "m", stream: true, messages: [{ role: "system", content: "y".repeat(300) }] }, "1");
    expect(scorer.rankWorkers(workers, other, "m").every((r) => !r.score.affinity)).toBe(true);
    // Saturated, it loses the preference; a failure does not move it.
    expect(scorer.rankWorkers([worker("a"), worker("b", { inFlight: 8 })], ask("q"), "m")[0]!.item.id).toBe("a");
    scorer.record({ id: "worker:a" }, ask("q"), { outcome: "failed", durationMs: 5 });
    expect(scorer.rankWorkers(workers, ask("q"), "m")[0]!.item.id).toBe("b");
    // The latest good answer moves it.
    scorer.record({ id: "worker:c" }, ask("q"), { outcome: "ok", ttftMs: 50, durationMs: 80 });
    expect(scorer.rankWorkers(workers, ask("q"), "m")[0]!.item.id).toBe("c");
  });

  it("follows the prefixes a worker advertises in its heartbeat (what other routers taught it)", () => {
    const { scorer } = setup();
    const key = ask("q").prefixKey!;
    const ranked = scorer.rankWorkers([worker("a"), worker("b", { prefixes: ["other", key] }), worker("c")], ask("q"), "m");
    expect(ranked[0]!.item.id).toBe("b");
    expect(ranked[0]!.score.affinity).toBe(true);
    expect(scorer.rankWorkers([worker("a"), worker("b", { prefixes: [key], inFlight: 8 })], ask("q"), "m")[0]!.item.id).toBe("a");
  });

  it("is off at prefixAffinity 1, and never reaches paid backends", () => {
    const { scorer } = setup({ prefixAffinity: 1 });
    scorer.record({ id: "worker:b" }, ask("q"), { outcome: "ok", ttftMs: 50, durationMs: 80 });
    expect(scorer.rankWorkers([worker("a"), worker("b")], ask("q"), "m").every((r) => !r.score.affinity)).toBe(true);
    const { scorer: s2 } = setup();
    s2.record({ id: "openrouter:m" }, ask("q"), { outcome: "ok", ttftMs: 50, durationMs: 80 });
    expect(s2.rankWorkers([worker("a"), worker("b")], ask("q"), "m").every((r) => !r.score.affinity)).toBe(true);
  });
});

