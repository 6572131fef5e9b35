// OpenTelemetry end to end: a router with telemetry.otlpEndpoint exports
// one trace per request to a local OTLP receiver, under the caller's W3C
// traceparent, with spans for admission, routing, the budget hold, each
// attempt, the first token and the settle; the worker is sent the attempt's
// traceparent (its engine job named by that span id). Off, no SDK is loaded.
import { readFileSync, readdirSync } from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { randomBytes } from "node:crypto";
import { SimWorker } from "#testkit/sim-worker";
import { engineRequestId } from "../../workers/agent/src/server/request.ts";
import { parseTraceparent } from "../../apps/router/src/observability/tracing.ts";
import { startTestRouter, type RouterFixture } from "../helpers/router.ts";
import { spawnRouter } from "../helpers/router-proc.ts";
import { REDIS_URL } from "../helpers/env.ts";
import { waitFor } from "../helpers/env.ts";
import { OtlpReceiver, type ReceivedSpan } from "./otlp-receiver.ts";

let receiver: OtlpReceiver;
let fx: RouterFixture;
let worker: SimWorker;

beforeAll(async () => {
  receiver = await new OtlpReceiver().start();
  fx = await startTestRouter({ "telemetry.otlpEndpoint": receiver.url, "telemetry.exportIntervalMs": 50, "telemetry.serviceName": "router-under-test" });
  worker = await new SimWorker({ id: "otel-sim", models: ["sim-chat"], registry: fx.registry, behavior: { tokens: 3 } }).start();
  await waitFor(() => fx.router.deps.directory.all().length === 1, { what: "worker registered" });
});

afterAll(async () => {
  await worker?.stop();
  await fx?.close();
  await receiver?.stop();
});

const hex = (bytes: number) => randomBytes(bytes).toString("hex");

async function chat(stream: boolean, traceparent?: string) {
  const res = await fetch(`${fx.router.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${fx.key}`, "content-type": "application/json", ...(traceparent ? { traceparent } : {}) },
    body: JSON.stringify({ model: "sim-chat", stream, messages: [{ role: "user", content: "trace me" }] }),
  });
  expect(res.status).toBe(200);
  await res.text();
  return res.headers.get("x-request-id")!;
}

const byName = (spans: ReceivedSpan[], name: string) => spans.filter((s) => s.name === name);

describe("OpenTelemetry traces", () => {
  it("one trace per request under the caller's traceparent, with the pipeline's spans, propagated to the worker", async () => {
    const callers = [0, 1].map(() => ({ traceId: hex(16), spanId: hex(8) }));
    const ids = [await chat(false, `00-${callers[0]!.traceId}-${callers[0]!.spanId}-01`), await chat(true, `00-${callers[1]!.traceId}-${callers[1]!.spanId}-01`), await chat(true)];
    // Every request's root span arrives (the batch goes every 50 ms; a stream's root ends with its last byte).
    await waitFor(() => ids.every((id) => receiver.spans.some((s) => s.attributes["switchyard.request_id"] === id)) && byName(receiver.spans, "settle").length >= 3, {
      timeoutMs: 15_000,
      what: "the three requests' spans",
    });
    await new Promise((r) => setTimeout(r, 300)); // late children of the last batch
    expect(receiver.contentTypes.every((t) => t.startsWith("application/json"))).toBe(true);
    const roots = ids.map((id) => receiver.spans.find((s) => s.attributes["switchyard.request_id"] === id)!);
    // One trace per request: three distinct trace ids, the first two the callers'.
    expect(new Set(roots.map((r) => r.traceId)).size).toBe(3);
    expect(roots[0]!.traceId).toBe(callers[0]!.traceId);
    expect(roots[0]!.parentSpanId).toBe(callers[0]!.spanId);
    expect(roots[1]!.traceId).toBe(callers[1]!.traceId);
    expect(roots[2]!.parentSpanId).toBeUndefined();
    for (const [i, root] of roots.entries()) {
      const spans = receiver.trace(root.traceId);
      expect(root).toMatchObject({ name: "POST /v1/chat/completions", kind: 2 /* SERVER */, service: "router-under-test" });
      expect(root.attributes["http.response.status_code"]).toBe(200);
      // Exactly one root in the trace: every other span hangs under it.
      expect(spans.filter((s) => s.parentSpanId === undefined || s.parentSpanId === callers[i]?.spanId)).toEqual([root]);
      const children = spans.filter((s) => s.parentSpanId === root.spanId).map((s) => s.name).sort();
      expect(children).toEqual(["admission", "attempt", "budget.hold", "routing", "settle"]);
      const attempt = byName(spans, "attempt")[0]!;
      expect(attempt.attributes).toMatchObject({ "switchyard.backend": "worker:otel-sim", "switchyard.outcome": "ok" });
      const firstToken = byName(spans, "first_token");
      if (i === 0) expect(firstToken).toEqual([]); // not streamed: no first token to time
      else {
        expect(firstToken).toHaveLength(1);
        expect(firstToken[0]!.parentSpanId).toBe(attempt.spanId);
        // It starts with the attempt (to the SDK's clock conversion) and ends inside it.
        const ms = (ns: bigint) => Number(ns / 1000n) / 1000;
        expect(Math.abs(ms(firstToken[0]!.startNs) - ms(attempt.startNs))).toBeLessThan(5);
        expect(ms(firstToken[0]!.endNs)).toBeLessThanOrEqual(ms(attempt.endNs) + 5);
      }
      expect(byName(spans, "settle")[0]!.attributes).toMatchObject({ "switchyard.status": "ok", "gen_ai.usage.output_tokens": 3 });
      for (const s of spans) expect(s.endNs).toBeGreaterThanOrEqual(s.startNs);
      // The worker was sent the attempt's span as its parent; its engine job is named by that span id.
      expect(worker.traceparents).toContain(`00-${root.traceId}-${attempt.spanId}-01`);
      expect(engineRequestId(ids[i]!, parseTraceparent(`00-${root.traceId}-${attempt.spanId}-01`)!.spanId, () => "x")).toBe(`${ids[i]}:${attempt.spanId}`);
    }
  });

  it("a malformed traceparent starts a new trace rather than failing the request", async () => {
    const before = receiver.spans.length;
    const id = await chat(false, "00-zzzz-not-a-trace-01");
    await waitFor(() => receiver.spans.slice(before).some((s) => s.attributes["switchyard.request_id"] === id), { timeoutMs: 10_000, what: "root span" });
    const root = receiver.spans.find((s) => s.attributes["switchyard.request_id"] === id)!;
    expect(root.parentSpanId).toBeUndefined();
    expect(root.traceId).toMatch(/^[0-9a-f]{32}$/);
  });
});

describe("a router process", () => {
  it("the CLI's bundle loads the SDK on demand and exports the same trace", { timeout: 120_000 }, async () => {
    const proc = await spawnRouter(
      { DATABASE_URL: fx.db.url, REDIS_URL, SWITCHYARD_REDIS__KEY_PREFIX: fx.redis.prefix, SWITCHYARD_TELEMETRY__OTLP_ENDPOINT: receiver.url, SWITCHYARD_TELEMETRY__EXPORT_INTERVAL_MS: "50" },
      "otel-router",
    );
    try {
      const traceId = hex(16);
      await waitFor(async () => (await fetch(`${proc.url}/v1/models`, { headers: { authorization: `Bearer ${fx.key}` } }).then((r) => r.json() as Promise<{ data: unknown[] }>)).data.length > 0, { timeoutMs: 30_000, what: "worker seen" });
      const res = await fetch(`${proc.url}/v1/chat/completions`, {
        method: "POST",
        headers: { authorization: `Bearer ${fx.key}`, "content-type": "application/json", traceparent: `00-${traceId}-${hex(8)}-01` },
        body: JSON.stringify({ model: "sim-chat", stream: true, messages: [{ role: "user", content: "from a process" }] }),
      });
      expect(res.status).toBe(200);
      await res.text();
      await waitFor(() => byName(receiver.trace(traceId), "settle").length === 1 && byName(receiver.trace(traceId), "POST /v1/chat/completions").length === 1, { timeoutMs: 15_000, what: "the process's trace" });
      expect(receiver.trace(traceId).find((s) => s.name === "POST /v1/chat/completions")!.service).toBe("switchyard-router");
    } finally {
      await proc.stop();
    }
  });
});

describe("telemetry off", () => {
  it("no SDK is loaded: only observability/otel.ts imports @opentelemetry, and only startTracing imports it, on demand", () => {
    const root = path.resolve(import.meta.dirname, "../../apps/router/src");
    const files: string[] = [];
    const walk = (d: string) => {
      for (const e of readdirSync(d, { withFileTypes: true })) {
        if (e.isDirectory()) walk(path.join(d, e.name));
        else if (e.name.endsWith(".ts")) files.push(path.join(d, e.name));
      }
    };
    walk(root);
    const importers = files.filter((f) => /from\s+["']@opentelemetry\//.test(readFileSync(f, "utf8")));
    expect(importers.map((f) => path.relative(root, f))).toEqual([path.join("observability", "otel.ts")]);
    const otelUsers = files.filter((f) => /["']\.{1,2}\/(observability\/)?otel\.ts["']/.test(readFileSync(f, "utf8")));
    expect(otelUsers.map((f) => path.relative(root, f))).toEqual([path.join("observability", "tracing.ts")]);
    // …and there by a dynamic import() alone, behind the endpoint check.
    const tracing = readFileSync(path.join(root, "observability", "tracing.ts"), "utf8");
    expect(tracing).toMatch(/if \(!cfg\.otlpEndpoint\) return undefined;\s*const \{ openTracing \} = await import\("\.\/otel\.ts"\);/);
    expect(tracing).not.toMatch(/^import .*otel\.ts/m);
  });

  it("a router without telemetry.otlpEndpoint has no tracer and answers without spans", async () => {
    const plain = await startTestRouter();
    try {
      expect(plain.router.deps.tracing).toBeUndefined();
      expect(plain.router.deps.config.telemetry.otlpEndpoint).toBeUndefined();
    } finally {
      await plain.close();
    }
  });
});
