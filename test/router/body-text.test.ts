// Issue 14: a worker is sent the client's own bytes while the router changed
// nothing in the body — and never those bytes once it did. A real router and
// a sim worker that keeps the bytes it was sent. The attacks: a client's own
// prefix name or cache scope (another tenant's), and output limits or
// allowed_tools the router rewrites, each must reach the worker as the router
// left it, not as the client wrote it.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { PREFIX_NAME_FIELD } from "@switchyard/state";
import { SimWorker } from "#testkit/sim-worker";
import { CACHE_SCOPE_FIELD } from "../../apps/router/src/routing/request-class.ts";
import { startTestRouter, type RouterFixture } from "../helpers/router.ts";
import { waitFor } from "../helpers/env.ts";

let fx: RouterFixture;
let worker: SimWorker;

beforeAll(async () => {
  fx = await startTestRouter({ "routing.scorer.epsilon": 0 });
  worker = await new SimWorker({ id: "bytes", models: ["m"], registry: fx.registry, behavior: { tokens: 2 } }).start();
  await waitFor(() => fx.router.deps.directory.all().length === 1, { what: "the worker visible" });
});

afterAll(async () => {
  await worker?.stop();
  await fx?.close();
});

async function send(text: string): Promise<{ sent: string; got: Record<string, unknown> }> {
  const res = await fetch(`${fx.router.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${fx.key}`, "content-type": "application/json" },
    body: text,
  });
  await res.text();
  expect(res.status).toBe(200);
  return { sent: worker.lastBodyText!, got: worker.lastBody! };
}

/** The router's own fields after the client's: the worker's bytes without them are the client's text, its closing brace aside. */
function routerFields(sent: string, clientText: string): Record<string, unknown> {
  const open = clientText.trimEnd().slice(0, -1);
  expect(sent.startsWith(open)).toBe(true);
  const rest = JSON.parse(`{${sent.slice(open.length).replace(/^,/, "")}`) as Record<string, unknown>;
  return rest;
}

describe("the body a worker is sent", () => {
  it("is the client's bytes, spacing and order kept, with only the router's fields after them", async () => {
    const text = '{ "messages" : [ {"content":"h\\u0069 there", "role":"user"} ],\n  "temperature": 0.50, "model":"m" }\n';
    const { sent, got } = await send(text);
    const fields = routerFields(sent, text);
    expect(Object.keys(fields).sort()).toEqual([CACHE_SCOPE_FIELD, PREFIX_NAME_FIELD].sort());
    expect(typeof fields[CACHE_SCOPE_FIELD]).toBe("string");
    expect(got).toEqual({ ...(JSON.parse(text) as object), ...fields });
  });

  it("of a stream asks for usage after the client's bytes when the client did not", async () => {
    const text = '{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}';
    const { sent } = await send(text);
    const fields = routerFields(sent, text);
    expect(fields.stream_options).toEqual({ include_usage: true });
  });

  it("never carries a client's own prefix name or cache scope (another tenant's), in bytes or parsed", async () => {
    const stolen = "s_victim_scope";
    const text = JSON.stringify({ model: "m", messages: [{ role: "user", content: "hi" }], [CACHE_SCOPE_FIELD]: stolen, [PREFIX_NAME_FIELD]: "victim-prefix" });
    const { sent, got } = await send(text);
    expect(sent).not.toContain(stolen);
    expect(sent).not.toContain("victim-prefix");
    expect(got[CACHE_SCOPE_FIELD]).not.toBe(stolen);
    expect(sent.split(`"${CACHE_SCOPE_FIELD}"`).length - 1).toBe(1);
  });

  it("carries the output limit the router settled on, not both of the client's", async () => {
    const text = '{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":50,"max_completion_tokens":7}';
    const { sent, got } = await send(text);
    expect(sent).not.toContain('"max_tokens":50');
    expect(got.max_tokens === undefined || got.max_completion_tokens === undefined).toBe(true);
    expect(got.max_tokens ?? got.max_completion_tokens).toBe(7);
  });

  it("carries allowed_tools narrowed to the allowed ones", async () => {
    const fn = (name: string) => ({ type: "function", function: { name, parameters: { type: "object" } } });
    const text = JSON.stringify({
      model: "m",
      messages: [{ role: "user", content: "hi" }],
      tools: [fn("keep"), fn("drop")],
      tool_choice: { type: "allowed_tools", allowed_tools: { mode: "auto", tools: [{ type: "function", function: { name: "keep" } }] } },
    });
    const { sent, got } = await send(text);
    expect(sent).not.toContain('"drop"');
    expect((got.tools as Array<{ function: { name: string } }>).map((t) => t.function.name)).toEqual(["keep"]);
    expect(got.tool_choice).toBe("auto");
  });
});
