// Issue 10, item 2: a client repeating one x-request-id must not get past its
// budget. The attack: a 1-cent daily budget, answers that cost 0.4 cents, and
// every request carrying the same client-chosen id — sequentially and all at
// once. Money keys on the id the router mints, so only what the budget
// affords is served, the rest is 402, and Redis agrees with the ledger.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createKey, createTenant, setBudget, setPrice } from "@switchyard/db";
import { budgetDay } from "@switchyard/state";
import { FakeOpenRouter } from "../fixtures/fake-openrouter.ts";
import { waitFor } from "../helpers/env.ts";
import { startTestRouter, type RouterFixture } from "../helpers/router.ts";

let fx: RouterFixture;
let openrouter: FakeOpenRouter;

const MODEL = "openai/gpt-4o-mini";
/** 0.4 cent, as OpenRouter writes it (USD). */
const ANSWER_USD = "0.004";
const ANSWER_MICRO = 400_000n;
/** The hold equals the answer's cost: 4 output tokens at 10¹¹ micro-cents per million, prompts free. */
const MAX_TOKENS = 4;

beforeAll(async () => {
  openrouter = await new FakeOpenRouter({ apiKey: "sk-or-test" }).start();
  openrouter.defaultScenario = { kind: "ok", costUsd: ANSWER_USD, completionTokens: 2 };
  fx = await startTestRouter({
    "providers.openrouter": { apiKey: "sk-or-test", baseUrl: openrouter.url },
    "billing.refreshMs": 100,
  });
  await setPrice(fx.db.db, { backend: "openrouter", model: MODEL, inputMicroPerMtok: 0n, outputMicroPerMtok: 100_000_000_000n });
  await waitFor(() => fx.router.deps.guard.deps.prices.price("openrouter", MODEL));
});

afterAll(async () => {
  await fx?.close();
  await openrouter?.stop();
});

/** A fresh tenant with a 1-cent day. */
async function tenantWithOneCent(name: string): Promise<{ id: number; key: string }> {
  const t = await createTenant(fx.db.db, name);
  if (!t.ok) throw new Error(`tenant ${name}: ${t.reason}`);
  const { key } = await createKey(fx.db.db, t.tenant.id);
  await setBudget(fx.db.db, { tenantId: t.tenant.id, dailyLimitCents: 1n });
  return { id: t.tenant.id, key };
}

const post = (key: string, clientId: string) =>
  fetch(`${fx.router.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json", "x-request-id": clientId },
    body: JSON.stringify({ model: MODEL, max_tokens: MAX_TOKENS, messages: [{ role: "user", content: "hi" }] }),
  });

interface Answer {
  status: number;
  id: string;
  echoed: string | null;
  code?: string;
}

async function answer(r: Response): Promise<Answer> {
  const body = (await r.json()) as { error?: { code: string } };
  return { status: r.status, id: r.headers.get("x-request-id")!, echoed: r.headers.get("x-client-request-id"), code: body.error?.code };
}

/** Redis's view of the tenant's day against the ledger's, once every settle is done. */
async function books(tenantId: number) {
  await fx.router.deps.guard.flush();
  const s = await fx.router.deps.guard.deps.store.snapshot(tenantId, budgetDay(Date.now(), "UTC"));
  const rows = await fx.db.sql`select request_id, cost_micro from spend_ledger where tenant_id = ${tenantId}`;
  const ledger = rows.reduce((acc, r) => acc + BigInt(r.cost_micro), 0n);
  return { spent: s.spentMicro, held: s.heldMicro, ledger, ids: rows.map((r) => r.request_id as string) };
}

function expectServedAndRefused(answers: Answer[], clientId: string) {
  const served = answers.filter((a) => a.status === 200);
  const refused = answers.filter((a) => a.status !== 200);
  // 1 cent affords two 0.4-cent answers, never a third.
  expect(served).toHaveLength(2);
  expect(refused.every((a) => a.status === 402 && a.code === "budget_exceeded")).toBe(true);
  // Every request got its own router id; the client's id is only echoed.
  const ids = answers.map((a) => a.id);
  expect(new Set(ids).size).toBe(answers.length);
  for (const a of answers) {
    expect(a.id).toMatch(/^req_[0-9a-f]{32}$/);
    expect(a.id).not.toBe(clientId);
    expect(a.echoed).toBe(clientId);
  }
  return served;
}

describe("a repeated client x-request-id cannot stretch a budget", () => {
  it("10 sequential requests with one x-request-id: two served, eight 402, Redis = ledger", async () => {
    const t = await tenantWithOneCent("seq-reuse");
    const clientId = "same-id-every-time-0001";
    const answers: Answer[] = [];
    for (let i = 0; i < 10; i++) {
      answers.push(await answer(await post(t.key, clientId)));
      // Let each settle land before the next request, as a patient attacker would.
      await fx.router.deps.guard.flush();
    }
    expect(answers.map((a) => a.status)).toEqual([200, 200, 402, 402, 402, 402, 402, 402, 402, 402]);
    const served = expectServedAndRefused(answers, clientId);
    const b = await books(t.id);
    expect(b.ids.sort()).toEqual(served.map((a) => a.id).sort());
    expect(b.ledger).toBe(2n * ANSWER_MICRO);
    expect(b.spent).toBe(b.ledger);
    expect(b.held).toBe(0n);
  });

  it("20 concurrent requests with one x-request-id: two served, eighteen 402, Redis = ledger", async () => {
    const t = await tenantWithOneCent("par-reuse");
    const clientId = "same-id-all-at-once-0002";
    const seen = openrouter.requests.length;
    const answers = await Promise.all(Array.from({ length: 20 }, async () => answer(await post(t.key, clientId))));
    const served = expectServedAndRefused(answers, clientId);
    // Only the served ones reached the provider, each with its router id upstream.
    const upstream = openrouter.requests.slice(seen).map((r) => r.headers["x-request-id"]);
    expect(upstream.sort()).toEqual(served.map((a) => a.id).sort());
    const b = await books(t.id);
    expect(b.ids.sort()).toEqual(served.map((a) => a.id).sort());
    expect(b.ledger).toBe(2n * ANSWER_MICRO);
    expect(b.spent).toBe(b.ledger);
    expect(b.held).toBe(0n);
  });

  it("x-client-request-id is the preferred correlation header; an unusable one is not echoed", async () => {
    const t = await tenantWithOneCent("echo-ids");
    const r = await fetch(`${fx.router.url}/v1/models`, { headers: { authorization: `Bearer ${t.key}`, "x-client-request-id": "corr-1234567", "x-request-id": "other-12345678" } });
    await r.text();
    expect(r.headers.get("x-client-request-id")).toBe("corr-1234567");
    expect(r.headers.get("x-request-id")).toMatch(/^req_[0-9a-f]{32}$/);
    const bad = await fetch(`${fx.router.url}/v1/models`, { headers: { authorization: `Bearer ${t.key}`, "x-request-id": "bad id with spaces" } });
    await bad.text();
    expect(bad.headers.get("x-client-request-id")).toBeNull();
    expect(bad.headers.get("x-request-id")).toMatch(/^req_[0-9a-f]{32}$/);
  });
});
