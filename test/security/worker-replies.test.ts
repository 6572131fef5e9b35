// Attacks by a worker on the router through its answers (issue 10, items 5
// and 12): bodies, error bodies, SSE lines and hidden-states bytes far over
// the limits must not cost the router their size in memory, must reach the
// client as one clear error, and must count against the worker's health;
// headers a worker sets on hidden states must not reach the client unless
// they are on the router's allow-list.
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { startTestRouter, type RouterFixture } from "../helpers/router.ts";
import { waitFor } from "../helpers/env.ts";
import { SimWorker } from "#testkit/sim-worker";
import { chunk, HostileWorker, type HostileHandler, MiB, peakRssGrowth } from "./hostile-worker.ts";

let fx: RouterFixture;
const workers: HostileWorker[] = [];

beforeAll(async () => {
  fx = await startTestRouter({
    "deadlines.totalMs": 60_000,
    "deadlines.idleMs": 10_000,
    // Small caps keep this file quick and its memory bounds tight: 6 × 8 MiB
    // at most held at once below (the default is 32 MiB).
    "router.maxUpstreamBodyBytes": 8 * MiB,
    "router.maxUpstreamHiddenStatesBytes": 16 * MiB,
  });
});

afterEach(async () => {
  await Promise.all(workers.splice(0).map((w) => w.stop()));
  await waitFor(() => fx.router.deps.directory.all().length === 0, { what: "registry empty" });
});

afterAll(async () => {
  await fx?.close();
});

async function hostile(id: string, handler: HostileHandler): Promise<HostileWorker> {
  const w = await new HostileWorker(id, fx.registry, handler).start();
  workers.push(w);
  await waitFor(() => fx.router.deps.directory.all().some((r) => r.id === id), { what: `${id} visible` });
  return w;
}

function post(path: string, body: unknown, headers: Record<string, string> = {}) {
  return fetch(`${fx.router.url}${path}`, {
    method: "POST",
    headers: { authorization: `Bearer ${fx.key}`, "content-type": "application/json", ...headers },
    body: JSON.stringify(body),
  });
}

const chat = (stream: boolean) => ({ model: "m", stream, messages: [{ role: "user", content: "hi" }] });
const health = (id: string) => fx.router.deps.directory.scorer.health!.view(id);
// eslint-disable-next-line @typescript-eslint/no-explicit-any
const errorOf = async (res: Response): Promise<any> => ((await res.json()) as { error: unknown }).error;

/** SSE payloads of a body, by the spec's rules (the router's events are single data lines). */
function payloads(text: string): string[] {
  return text
    .split("\n\n")
    .filter((b) => b.length > 0)
    .map((b) => {
      expect(b).toMatch(/^data: [^\r\n]*$/);
      return b.slice(6);
    });
}

describe("oversized answers from a worker", () => {
  it("a 300 MiB JSON answer (no content-length) gets 502 upstream_response_too_large, the router stays small, the worker is marked", async () => {
    const w = await hostile("huge-json", async (_req, res) => {
      res.writeHead(200, { "content-type": "application/json" });
      res.write('{"id":"x","choices":[{"message":{"content":"');
      await w.pour(res, 300 * MiB);
      res.end('"}}]}');
    });
    const { result: res, growthBytes } = await peakRssGrowth(() => post("/v1/chat/completions", chat(false)));
    expect(res.status).toBe(502);
    const err = await errorOf(res);
    expect(err).toMatchObject({ code: "upstream_response_too_large", type: "upstream_error" });
    expect(err.message).toMatch(/over the limit of 8388608 bytes/);
    expect(growthBytes).toBeLessThan(100 * MiB);
    // The router stopped reading soon after the limit: the worker could not push it all.
    expect(w.bytesWritten).toBeLessThan(64 * MiB);
    expect(health("huge-json").consecutiveFailures).toBe(1);
  });

  it("a sound answer just under the cap is relayed whole (embeddings are legitimately large)", async () => {
    const vector = Array.from({ length: 384 }, (_, i) => Math.sin(i) / 3);
    const answer = JSON.stringify({ object: "list", model: "m", data: Array.from({ length: 1000 }, (_, index) => ({ object: "embedding", index, embedding: vector })), usage: { prompt_tokens: 1000, total_tokens: 1000 } });
    expect(answer.length).toBeGreaterThan(7 * MiB);
    expect(answer.length).toBeLessThan(8 * MiB);
    await hostile("big-but-fine", (_req, res) => {
      res.writeHead(200, { "content-type": "application/json" });
      res.end(answer);
    });
    const res = await post("/v1/embeddings", { model: "m", input: ["a", "b"] });
    expect(res.status).toBe(200);
    expect(await res.text()).toBe(answer);
    expect(health("big-but-fine").consecutiveFailures).toBe(0);
  });

  it("a declared content-length over the limit is refused before reading it", async () => {
    const w = await hostile("declares-huge", async (_req, res) => {
      res.writeHead(200, { "content-type": "application/json", "content-length": String(300 * MiB) });
      await w.pour(res, 300 * MiB);
      res.end();
    });
    const res = await post("/v1/chat/completions", chat(false));
    expect(res.status).toBe(502);
    expect((await errorOf(res)).message).toMatch(/declared 314572800 bytes/);
    expect(w.bytesWritten).toBeLessThan(64 * MiB);
  });

  it("6 concurrent 400 MiB answers: every one refused, the router's memory bounded, the worker ejected", async () => {
    const w = await hostile("six-huge", async (_req, res) => {
      res.writeHead(200, { "content-type": "application/json" });
      await w.pour(res, 400 * MiB);
      res.end();
    });
    const { result, growthBytes } = await peakRssGrowth(() => Promise.all(Array.from({ length: 6 }, () => post("/v1/chat/completions", chat(false)))));
    for (const res of result) {
      expect(res.status).toBe(502);
      expect((await errorOf(res)).code).toBe("upstream_response_too_large");
    }
    // 6 × the 8 MiB cap at most is held at once, far from 6 × 400 MiB.
    expect(growthBytes).toBeLessThan(100 * MiB);
    expect(w.bytesWritten).toBeLessThan(6 * 64 * MiB);
    // Three failures in a row (routing.health.failureThreshold) eject it: the next request goes to a sound worker.
    expect(health("six-huge").ejected).toBe(true);
    const good = await new SimWorker({ id: "good", models: ["m"], registry: fx.registry }).start();
    try {
      await waitFor(() => fx.router.deps.directory.all().some((r) => r.id === "good"), { what: "good visible" });
      const after = await post("/v1/chat/completions", chat(false));
      expect(after.status).toBe(200);
      expect(after.headers.get("x-switchyard-backend")).toBe("worker:good");
      expect(w.requests).toBe(6);
    } finally {
      await good.stop();
    }
  });

  it("a 300 MiB error body is read only as far as its message, and the status still decides", async () => {
    const w = await hostile("huge-error", async (_req, res) => {
      res.writeHead(500, { "content-type": "application/json" });
      res.write(`{"error":{"message":"${"m".repeat(5000)}`);
      await w.pour(res, 300 * MiB);
      res.end('"}}');
    });
    const { result: res, growthBytes } = await peakRssGrowth(() => post("/v1/chat/completions", chat(false)));
    expect(res.status).toBe(502);
    expect((await errorOf(res)).code).toBe("bad_upstream");
    expect(growthBytes).toBeLessThan(100 * MiB);
    expect(w.bytesWritten).toBeLessThan(64 * MiB);
  });

  it("an error message is passed on clipped, and only as a string", async () => {
    await hostile("long-message", (_req, res) => {
      res.writeHead(400, { "content-type": "application/json" });
      res.end(JSON.stringify({ error: { message: "x".repeat(50_000), param: { evil: true }, code: 7 } }));
    });
    const res = await post("/v1/chat/completions", chat(false));
    expect(res.status).toBe(400);
    const err = await errorOf(res);
    expect(err.message.length).toBeLessThanOrEqual(1_000);
    expect(err.param).toBeNull();
  });
});

describe("oversized SSE from a worker", () => {
  it("a newline-free line of 300 MiB after the first event ends the stream with exactly one error event", async () => {
    const w = await hostile("endless-line", async (_req, res) => {
      res.writeHead(200, { "content-type": "text/event-stream" });
      res.write(`data: ${JSON.stringify(chunk("c1", "hello"))}\n\n`);
      res.write("data: ");
      await w.pour(res, 300 * MiB);
      res.end("\n\n");
    });
    const { result: text, growthBytes } = await peakRssGrowth(async () => {
      const res = await post("/v1/chat/completions", chat(true));
      expect(res.status).toBe(200);
      return res.text();
    });
    const events = payloads(text);
    expect(events).toHaveLength(2);
    expect(JSON.parse(events[0]!)).toMatchObject({ id: "c1" });
    expect(JSON.parse(events[1]!).error).toMatchObject({ code: "upstream_response_too_large", type: "upstream_error" });
    expect(growthBytes).toBeLessThan(100 * MiB);
    expect(w.bytesWritten).toBeLessThan(64 * MiB);
    expect(health("endless-line").consecutiveFailures).toBe(1);
  });

  it("an event just under the limit is relayed", async () => {
    const big = chunk("c1", "x".repeat(1000 * 1024));
    await hostile("big-event", (_req, res) => {
      res.writeHead(200, { "content-type": "text/event-stream" });
      res.end(`data: ${JSON.stringify(big)}\n\ndata: [DONE]\n\n`);
    });
    const res = await post("/v1/chat/completions", chat(true));
    expect(payloads(await res.text())).toEqual([JSON.stringify(big), "[DONE]"]);
  });

  it("an event over the limit before the first byte is a clean 502", async () => {
    await hostile("big-first-event", (_req, res) => {
      res.writeHead(200, { "content-type": "text/event-stream" });
      // Many short data lines: each line is small, the event is not.
      res.end(`${"data: xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\n".repeat(20_000)}\n`);
    });
    const res = await post("/v1/chat/completions", chat(true));
    expect(res.status).toBe(502);
    const err = await errorOf(res);
    expect(err.code).toBe("upstream_response_too_large");
    expect(err.message).toMatch(/SSE event over the limit of 1048576 bytes/);
  });
});

describe("hidden states from a worker", () => {
  const safetensors = Buffer.from("not really safetensors, but bytes");

  it("only allow-listed headers reach the client: the worker's route and fencing token do not", async () => {
    await hostile("forges-headers", (_req, res) => {
      res.writeHead(200, {
        "content-type": "application/octet-stream",
        "content-length": String(safetensors.length),
        "x-switchyard-route": "worker=victim; reason=forged",
        "x-switchyard-fencing-token": "9007199254740991",
        "x-switchyard-backend": "worker:victim",
        "x-switchyard-tokens": "12",
        "x-switchyard-layers": "0,30",
        "set-cookie": "session=stolen",
        "access-control-allow-origin": "*",
      });
      res.end(safetensors);
    });
    const res = await post("/v1/hidden_states", { model: "m", input: "hello" });
    expect(res.status).toBe(200);
    expect(Buffer.from(await res.arrayBuffer())).toEqual(safetensors);
    expect(res.headers.get("content-type")).toBe("application/octet-stream");
    expect(res.headers.get("x-switchyard-tokens")).toBe("12");
    expect(res.headers.get("x-switchyard-layers")).toBe("0,30");
    expect(res.headers.get("x-switchyard-backend")).toBe("worker:forges-headers");
    expect(res.headers.get("x-switchyard-route")).toBeNull();
    expect(res.headers.get("x-switchyard-fencing-token")).toBeNull();
    expect(res.headers.get("set-cookie")).toBeNull();
    expect(res.headers.get("access-control-allow-origin")).toBeNull();
    // Asked for, the route explanation is the router's own.
    const debug = await post("/v1/hidden_states", { model: "m", input: "hello" }, { "x-switchyard-debug": "route" });
    await debug.arrayBuffer();
    expect(debug.headers.get("x-switchyard-route") ?? "").not.toMatch(/forged|victim/);
  });

  it("an allow-listed header with a malformed value is dropped, an unexpected content-type replaced", async () => {
    await hostile("bad-values", (_req, res) => {
      res.writeHead(200, { "content-type": "text/html", "x-switchyard-tokens": "12; drop table", "x-switchyard-layers": "a,b" });
      res.end("<script>alert(1)</script>");
    });
    const res = await post("/v1/hidden_states", { model: "m", input: "hello" });
    await res.arrayBuffer();
    expect(res.headers.get("content-type")).toBe("application/octet-stream");
    expect(res.headers.get("x-switchyard-tokens")).toBeNull();
    expect(res.headers.get("x-switchyard-layers")).toBeNull();
  });

  it("a declared length over router.maxUpstreamHiddenStatesBytes is a 502 before any byte", async () => {
    const w = await hostile("hs-declares-huge", async (_req, res) => {
      res.writeHead(200, { "content-type": "application/octet-stream", "content-length": String(300 * MiB) });
      await w.pour(res, 300 * MiB);
      res.end();
    });
    const res = await post("/v1/hidden_states", { model: "m", input: "hello" });
    expect(res.status).toBe(502);
    expect((await errorOf(res)).code).toBe("upstream_response_too_large");
    expect(w.bytesWritten).toBeLessThan(64 * MiB);
  });

  it("a chunked body past the cap is cut off there, and counts against the worker", async () => {
    const w = await hostile("hs-endless", async (_req, res) => {
      res.writeHead(200, { "content-type": "application/octet-stream" });
      await w.pour(res, 300 * MiB);
      res.end();
    });
    const { result, growthBytes } = await peakRssGrowth(async () => {
      const res = await post("/v1/hidden_states", { model: "m", input: "hello" });
      expect(res.status).toBe(200);
      let got = 0;
      const reader = res.body!.getReader();
      try {
        for (;;) {
          const { done, value } = await reader.read();
          if (done) return { got, cut: false };
          got += value.byteLength;
        }
      } catch {
        return { got, cut: true };
      }
    });
    // Never a clean end that looks like a whole answer.
    expect(result.cut).toBe(true);
    expect(result.got).toBeLessThanOrEqual(16 * MiB);
    expect(growthBytes).toBeLessThan(100 * MiB);
    expect(w.bytesWritten).toBeLessThan(64 * MiB);
    await waitFor(() => health("hs-endless").consecutiveFailures === 1, { what: "failure recorded" });
  });
});
