// A client's `anthropic-beta` through a real router (real Redis and
// Postgres, budgets, ledger) to the Anthropic backend and its fake, which
// refuses a beta Anthropic does not know and a prompt longer than the
// model's context window (200k tokens; 1M on Sonnet 4+ and Opus 4.6 with
// context-1m), as Anthropic does. Only betas whose effect survives the
// Messages → chat → Messages translation reach Anthropic; context-1m opens
// the 1M window, and such a prompt is billed at the price row's long-context
// tier.
import Anthropic from "@anthropic-ai/sdk";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { setBudget, setPrice } from "@switchyard/db";
import { FakeAnthropic } from "../fixtures/fake-anthropic.ts";
import { waitFor } from "../helpers/env.ts";
import { startTestRouter, type RouterFixture } from "../helpers/router.ts";

const MODEL = "claude-sonnet-4-6";
const ONE_M = "context-1m-2025-08-07";

let fx: RouterFixture;
let anthropic: FakeAnthropic;
let client: Anthropic;

beforeAll(async () => {
  anthropic = await new FakeAnthropic("sk-ant-beta").start();
  fx = await startTestRouter({ "providers.anthropic": { apiKey: "sk-ant-beta", baseUrl: anthropic.url }, "billing.refreshMs": 100 });
  await setPrice(fx.db.db, { backend: "anthropic", model: MODEL, inputMicroPerMtok: 300_000_000n, outputMicroPerMtok: 1_500_000_000n });
  await setBudget(fx.db.db, { tenantId: fx.tenantId, dailyLimitCents: 1_000_000n });
  await waitFor(() => fx.router.deps.guard.deps.prices.price("anthropic", MODEL), { what: "price loaded" });
  client = new Anthropic({ apiKey: fx.key, baseURL: fx.router.url, maxRetries: 0 });
}, 120_000);

afterAll(async () => {
  await fx?.close();
  await anthropic?.stop();
});

/** The `anthropic-beta` header of the last request Anthropic got (undefined: none). */
const lastBetas = () => anthropic.requests.at(-1)!.headers["anthropic-beta"];

/** The ledger row's cost of a request, once the router has written it. */
async function ledgerCost(requestId: string): Promise<bigint> {
  const rows = await waitFor(async () => {
    await fx.router.deps.guard.flush();
    const r = await fx.db.sql`select cost_micro, cost_source from spend_ledger where request_id = ${requestId}`;
    return r.length > 0 ? r : undefined;
  });
  expect(rows[0]!.cost_source).toBe("price_table");
  return BigInt(rows[0]!.cost_micro as string);
}

/** A prompt of this many words: the fake counts a token a word, and 3 for the message. */
const words = (n: number) => "w ".repeat(n);

describe("anthropic-beta", () => {
  it("goes on with the betas the translation carries, in the client's order, each once; the others are left out", async () => {
    anthropic.enqueue({ kind: "ok", text: "fine" });
    const msg = await client.messages.create(
      { model: MODEL, max_tokens: 64, messages: [{ role: "user", content: "hi" }] },
      // Claude Code's attribution, the context edits the router applies itself, a tool beta, a name twice, and junk.
      { headers: { "anthropic-beta": `claude-code-20250219, interleaved-thinking-2025-05-14,context-management-2025-06-27,${ONE_M},web-search-2025-03-05, interleaved-thinking-2025-05-14,Not A Beta!` } },
    );
    expect(msg.content).toEqual([{ type: "text", text: "fine" }]);
    expect(lastBetas()).toBe(`interleaved-thinking-2025-05-14,${ONE_M}`);
  });

  it("the SDK's betas (client.beta.messages) go on the same way; none sent, no header", async () => {
    anthropic.enqueue({ kind: "ok", text: "beta" });
    await client.beta.messages.create({ model: MODEL, max_tokens: 64, betas: ["fine-grained-tool-streaming-2025-05-14", "files-api-2025-04-14"], messages: [{ role: "user", content: "hi" }] });
    expect(lastBetas()).toBe("fine-grained-tool-streaming-2025-05-14");
    anthropic.enqueue({ kind: "ok", text: "none" });
    await client.messages.create({ model: MODEL, max_tokens: 64, messages: [{ role: "user", content: "hi" }] }, { headers: { "anthropic-beta": "claude-code-20250219" } });
    expect(lastBetas()).toBeUndefined();
  });

  it("reaches Anthropic from /v1/chat/completions and from a token count too", async () => {
    anthropic.enqueue({ kind: "ok", text: "chat" });
    const res = await fetch(`${fx.router.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${fx.key}`, "content-type": "application/json", "anthropic-beta": ONE_M },
      body: JSON.stringify({ model: MODEL, max_tokens: 16, messages: [{ role: "user", content: "hi" }] }),
    });
    expect(res.status).toBe(200);
    expect(lastBetas()).toBe(ONE_M);
    const count = await client.messages.countTokens({ model: MODEL, messages: [{ role: "user", content: words(10) }] }, { headers: { "anthropic-beta": `${ONE_M},claude-code-20250219` } });
    expect(count.input_tokens).toBe(13);
    expect(anthropic.requests.at(-1)!.path).toBe("/v1/messages/count_tokens");
    expect(lastBetas()).toBe(ONE_M);
  });

  it("a prompt past 200k tokens is Anthropic's 400 without context-1m, and answered with it", async () => {
    const long = { model: MODEL, max_tokens: 64, messages: [{ role: "user" as const, content: words(200_100) }] };
    const refused = await client.messages.create(long).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(refused).toBeInstanceOf(Anthropic.BadRequestError);
    expect((refused as InstanceType<typeof Anthropic.BadRequestError>).message).toContain("prompt is too long: 200103 tokens > 200000 maximum");
    anthropic.enqueue({ kind: "ok", text: "read it all", promptTokens: 200_103 });
    const res = await client.messages.create(long, { headers: { "anthropic-beta": ONE_M } }).withResponse();
    expect(res.data.content).toEqual([{ type: "text", text: "read it all" }]);
    expect(res.data.usage).toMatchObject({ input_tokens: 200_103, output_tokens: 3 });
    // The price row sets no long-context tier: Anthropic's published one bills it, twice the input and 1.5× the output rate for every token.
    expect(await ledgerCost(res.response.headers.get("x-request-id")!)).toBe(200_103n * 600n + 3n * 2_250n);
  });

  it("a prompt at 200k tokens is billed at the ordinary rates, with the beta or not", async () => {
    anthropic.enqueue({ kind: "ok", text: "just fits", promptTokens: 200_000 });
    const res = await client.messages.create({ model: MODEL, max_tokens: 64, messages: [{ role: "user", content: words(199_997) }] }, { headers: { "anthropic-beta": ONE_M } }).withResponse();
    expect(res.data.usage.output_tokens).toBe(2);
    expect(await ledgerCost(res.response.headers.get("x-request-id")!)).toBe(200_000n * 300n + 2n * 1_500n);
  });
});
