// Issue 10 item 8, the engine half: the engine's prefix cache is scoped by
// tenant. One real router, one real worker (so both tenants land on the same
// engine): beta's long system prompt is cached, alpha's identical prompt
// computes everything (no faster first token, cached_tokens 0) — also when
// alpha sends beta's scope itself — while beta's follow-ups and alpha's own
// follow-ups reuse their own copies.
import { afterAll, describe, expect, it } from "vitest";
import type { AgentHandle } from "@switchyard/agent";
import { createKey, createTenant } from "@switchyard/db";
import { CACHE_SCOPE_FIELD, cacheScope } from "../../apps/router/src/routing/request-class.ts";
import { startTestRouter, type RouterFixture } from "../helpers/router.ts";
import { startTestWorker, WORKER_TOKEN } from "../helpers/worker.ts";

const LLM = "smollm2-135m-instruct";
const system = (topic: string) => ({
  role: "system",
  content: `You are the internal assistant of the ${topic} desk. Answer in one short sentence, quote figures only from the attached memo, never reveal the memo to anyone outside the desk, and say when a figure is missing.`,
});

let fx: RouterFixture | undefined;
let agent: AgentHandle | undefined;

afterAll(async () => {
  await agent?.stop();
  await fx?.close();
});

async function ask(key: string, sys: { role: string; content: string }, question: string, extra: Record<string, unknown> = {}) {
  const res = await fetch(`${fx!.router.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: JSON.stringify({ model: LLM, messages: [sys, { role: "user", content: question }], temperature: 0, max_tokens: 4, ...extra }),
  });
  expect(res.status).toBe(200);
  const body = (await res.json()) as { choices: { message: { content: string } }[]; usage: { prompt_tokens: number; prompt_tokens_details?: { cached_tokens?: number } } };
  return { worker: res.headers.get("x-switchyard-backend"), cached: body.usage.prompt_tokens_details?.cached_tokens ?? -1, text: body.choices[0]!.message.content };
}

describe("engine prefix cache is per tenant (real router, real engine)", () => {
  it("another tenant's identical prompt on the same worker reuses nothing; each tenant reuses its own", async () => {
    fx = await startTestRouter({ "workers.token": WORKER_TOKEN, "routing.scorer.epsilon": 0 });
    agent = await startTestWorker(fx, { id: "scope-1", models: [LLM] });
    // The fixture's tenant plays beta; alpha is a second tenant.
    const t = await createTenant(fx.db.db, "alpha");
    if (!t.ok) throw new Error("tenant alpha");
    const alphaKey = (await createKey(fx.db.db, t.tenant.id)).key;
    const sys = system("treasury");

    const beta = await ask(fx.key, sys, "What is the Q3 cash position?");
    expect(beta.worker).toBe("worker:scope-1");
    expect(beta.cached).toBe(0);

    // Same worker, same prompt, other tenant: the engine computes it all.
    const alpha = await ask(alphaKey, sys, "What is the Q3 cash position?");
    expect(alpha.worker).toBe("worker:scope-1");
    expect(alpha.cached).toBe(0);
    expect(alpha.text).toBe(beta.text);

    // Beta's follow-up reuses beta's copy; alpha's follow-up reuses alpha's own.
    const betaAgain = await ask(fx.key, sys, "And the Q4 forecast?");
    expect(betaAgain.cached).toBeGreaterThan(30);
    const alphaAgain = await ask(alphaKey, sys, "And the Q4 forecast?");
    expect(alphaAgain.cached).toBeGreaterThan(30);

    // Alpha can't borrow beta's scope by sending it: the router overwrites the field.
    // (Its first words differ from the treasury prompt's, which beta's scope also holds.)
    const other = { role: "system", content: `Mergers desk policy: ${system("mergers").content}` };
    expect((await ask(fx.key, other, "Who is the counterparty?")).cached).toBe(0);
    const forged = await ask(alphaKey, other, "Who is the counterparty?", { [CACHE_SCOPE_FIELD]: cacheScope(String(fx.tenantId)) });
    expect(forged.cached).toBe(0);
    expect((await ask(fx.key, other, "What is the price?")).cached).toBeGreaterThan(30);
  }, 120_000);
});
