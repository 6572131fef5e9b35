// Issue 10, item 12: inputs that passed validation and then broke something
// further in. Numbers beyond the engine's protobuf field types failed to
// encode in the worker (500 → 502, counted against the worker's health);
// 500k-deep JSON overflowed the stack (500); a tenant named `constructor`
// (and models named after Object.prototype's members) hit plain-object
// lookups (500). Each is now the client's 400, or an ordinary answer.
import { createKey, createTenant } from "@switchyard/db";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { nestsDeeperThan, MAX_JSON_DEPTH } from "../../apps/router/src/middleware.ts";
import { SimWorker } from "#testkit/sim-worker";
import { waitFor } from "../helpers/env.ts";
import { startTestRouter, type RouterFixture } from "../helpers/router.ts";

let fx: RouterFixture;
let worker: SimWorker;
let protoWorker: SimWorker;
let constructorKey: string;

beforeAll(async () => {
  fx = await startTestRouter({
    // Per-tenant config exists (so the lookups are real), for other tenants.
    "routing.tenantChains": { someone: ["local", "remote"] },
    "routing.models": { alias: { worker: "m" } },
  });
  worker = await new SimWorker({ id: "val-w", models: ["m"], registry: fx.registry }).start();
  // A worker really serving a model named like an Object.prototype member.
  protoWorker = await new SimWorker({ id: "val-proto", models: ["constructor"], registry: fx.registry }).start();
  await waitFor(() => fx.router.deps.directory.all().length === 2);
  const t = await createTenant(fx.db.db, "constructor");
  if (!t.ok) throw new Error("tenant");
  constructorKey = (await createKey(fx.db.db, t.tenant.id)).key;
});

afterAll(async () => {
  await worker?.stop();
  await protoWorker?.stop();
  await fx?.close();
});

// eslint-disable-next-line @typescript-eslint/no-explicit-any
async function post(path: string, body: string, key = fx.key): Promise<{ status: number; body: any }> {
  const res = await fetch(`${fx.router.url}${path}`, { method: "POST", headers: { authorization: `Bearer ${key}`, "content-type": "application/json" }, body });
  const text = await res.text();
  try {
    return { status: res.status, body: JSON.parse(text) };
  } catch {
    return { status: res.status, body: text };
  }
}

const total = (w: SimWorker) => [...w.served.values()].reduce((a, b) => a + b, 0);

const chat = (over: Record<string, unknown>, key?: string) => post("/v1/chat/completions", JSON.stringify({ model: "m", messages: [{ role: "user", content: "hi" }], ...over }), key);

describe("numbers are bounded by the engine's protobuf field types", () => {
  const tooBig = [4_294_967_296, Number.MAX_SAFE_INTEGER];

  it.each(["max_tokens", "max_completion_tokens", "top_k"])("%s beyond uint32 is a 400 naming the field, and no worker sees it", async (field) => {
    const served = total(worker);
    for (const v of tooBig) {
      const r = await chat({ [field]: v });
      expect(r.status).toBe(400);
      expect(r.body.error.code).toBe("invalid_request");
      expect(r.body.error.param).toBe(field);
    }
    const c = await post("/v1/completions", JSON.stringify({ model: "m", prompt: "hi", [field]: 4_294_967_296 }));
    expect(c.status).toBe(400);
    expect(c.body.error.param).toBe(field);
    expect(total(worker)).toBe(served);
  });

  it("the largest uint32 is accepted", async () => {
    const r = await chat({ max_tokens: 4_294_967_295, top_k: 4_294_967_295 });
    expect(r.status).toBe(200);
  });

  it("seed must be a safe integer; logprobs and top_logprobs keep OpenAI's ranges", async () => {
    expect((await chat({ seed: 2 ** 53 })).body.error.param).toBe("seed");
    expect((await chat({ seed: -(2 ** 53) })).body.error.param).toBe("seed");
    expect((await chat({ seed: Number.MAX_SAFE_INTEGER })).status).toBe(200);
    expect((await chat({ logprobs: true, top_logprobs: 21 })).body.error.param).toBe("top_logprobs");
    expect((await chat({ logprobs: "yes" })).body.error.param).toBe("logprobs");
    const c = await post("/v1/completions", JSON.stringify({ model: "m", prompt: "hi", logprobs: 4_294_967_296 }));
    expect(c.body.error.param).toBe("logprobs");
  });

  it("hidden_states layers and embeddings dimensions beyond uint32 are 400s", async () => {
    const h = await post("/v1/hidden_states", JSON.stringify({ model: "m", input: "hi", layers: [4_294_967_296] }));
    expect(h.status).toBe(400);
    expect(h.body.error.param).toBe("layers[0]");
    const e = await post("/v1/embeddings", JSON.stringify({ model: "m", input: "hi", dimensions: Number.MAX_SAFE_INTEGER }));
    expect(e.status).toBe(400);
    expect(e.body.error.param).toBe("dimensions");
  });
});

describe("stream_options without stream", () => {
  it("is OpenAI's 400 naming stream_options on chat and completions, and no worker sees it", async () => {
    const served = total(worker);
    for (const stream of [undefined, false, null]) {
      const r = await chat({ stream, stream_options: { include_usage: true } });
      expect(r.status).toBe(400);
      expect(r.body.error.param).toBe("stream_options");
    }
    const c = await post("/v1/completions", JSON.stringify({ model: "m", prompt: "hi", stream_options: { include_usage: true } }));
    expect(c.status).toBe(400);
    expect(c.body.error.param).toBe("stream_options");
    expect(total(worker)).toBe(served);
    // null is "not given"; with stream: true the usage chunk arrives.
    expect((await chat({ stream_options: null })).status).toBe(200);
    const s = await post("/v1/chat/completions", JSON.stringify({ model: "m", messages: [{ role: "user", content: "hi" }], stream: true, stream_options: { include_usage: true } }));
    expect(s.status).toBe(200);
    expect(String(s.body)).toMatch(/"usage":\{"prompt_tokens":\d+/);
  });
});

describe("content part types", () => {
  it("a type OpenAI does not list (a video, a typo) is its 400 naming the part, and no worker sees it; the listed ones pass", async () => {
    const served = total(worker);
    for (const type of ["video_url", "image", "txt"]) {
      const r = await chat({ messages: [{ role: "user", content: [{ type: "text", text: "hi" }, { type }] }] });
      expect(r.status).toBe(400);
      expect(r.body.error.code).toBe("invalid_request");
      expect(r.body.error.param).toBe("messages[0].content[1].type");
      expect(r.body.error.message).toContain(`Invalid value: '${type}'. Supported values are: 'text', 'image_url', 'input_audio', 'refusal', and 'file'.`);
    }
    expect(total(worker)).toBe(served);
    expect((await chat({ messages: [{ role: "user", content: [{ type: "text", text: "hi" }] }] })).status).toBe(200);
  });
});

describe("JSON nesting depth", () => {
  it("500,000-deep nesting is a 400 invalid_json, and the router keeps answering", async () => {
    const depth = 500_000;
    const deep = `${"[".repeat(depth)}${"]".repeat(depth)}`;
    for (const body of [deep, `{"model":"m","messages":[{"role":"user","content":"hi"}],"metadata":${deep}}`, `{"model":"m","messages":${"[".repeat(depth)}`]) {
      const r = await post("/v1/chat/completions", body);
      expect(r.status).toBe(400);
      expect(r.body.error.code).toBe("invalid_json");
    }
    expect((await chat({})).status).toBe(200);
  });

  it("nesting up to the cap is fine, and brackets inside strings don't count", async () => {
    let nested: unknown = "leaf";
    for (let i = 0; i < MAX_JSON_DEPTH - 2; i++) nested = [nested];
    expect((await chat({ metadata: nested })).status).toBe(200);
    const brackets = `[{"\\"${"[".repeat(10_000)}`;
    expect((await chat({ messages: [{ role: "user", content: brackets }] })).status).toBe(200);
  });

  it("the scanner counts depth exactly, outside strings only", () => {
    expect(nestsDeeperThan("[[[]]]", 3)).toBe(false);
    expect(nestsDeeperThan("[[[[]]]]", 3)).toBe(true);
    expect(nestsDeeperThan('{"a":{"b":[1,2,{"c":"[[[[[[["}]}}', 4)).toBe(false);
    expect(nestsDeeperThan('{"a":{"b":[1,2,{"c":"[[[[[[["}]}}', 3)).toBe(true);
    // An escaped quote does not end the string; an escaped backslash does not escape the quote.
    expect(nestsDeeperThan('["\\"[[[[[[", 1]', 1)).toBe(false);
    expect(nestsDeeperThan('["\\\\", [[[1]]]]', 3)).toBe(true);
    expect(nestsDeeperThan('["\\\\\\"[[[[", 0]', 1)).toBe(false);
    // Sibling structures don't add up.
    expect(nestsDeeperThan(`[${"[],".repeat(1000)}[]]`, 2)).toBe(false);
    // Both kinds of bracket count toward the depth, at the cap and one over it (with few brackets in all, and with many).
    const mixed = '{"a":[{"b":[{"c":[]}]}]}';
    expect(nestsDeeperThan(mixed, 6)).toBe(false);
    expect(nestsDeeperThan(mixed, 5)).toBe(true);
    expect(nestsDeeperThan(`[${'"x",'.repeat(100)}${mixed}]`, 6)).toBe(true);
    expect(nestsDeeperThan(`[${"{},".repeat(100)}${mixed}]`, 7)).toBe(false);
    expect(nestsDeeperThan(`[${"{},".repeat(100)}${mixed}]`, 6)).toBe(true);
  });
});

describe("names that are Object.prototype members", () => {
  it("a tenant named `constructor` is served like any other", async () => {
    const r = await chat({}, constructorKey);
    expect(r.status).toBe(200);
    const s = await chat({ stream: true }, constructorKey);
    expect(s.status).toBe(200);
    const m = await fetch(`${fx.router.url}/v1/models`, { headers: { authorization: `Bearer ${constructorKey}` } });
    expect(m.status).toBe(200);
    await m.text();
    expect((await chat({ model: "alias" }, constructorKey)).status).toBe(200);
  });

  it.each(["__proto__", "toString", "hasOwnProperty", "valueOf", "__defineGetter__"])("model %s is 404 model_not_found", async (model) => {
    for (const key of [fx.key, constructorKey]) {
      const r = await chat({ model }, key);
      expect(r.status).toBe(404);
      expect(r.body.error.code).toBe("model_not_found");
      const e = await post("/v1/embeddings", JSON.stringify({ model, input: "hi" }), key);
      expect(e.status).toBe(404);
    }
  });

  it("a model really named `constructor` reaches the worker serving it", async () => {
    for (const key of [fx.key, constructorKey]) {
      const r = await chat({ model: "constructor" }, key);
      expect(r.status).toBe(200);
    }
    expect(protoWorker.served.get("/v1/chat/completions")).toBe(2);
  });
});
