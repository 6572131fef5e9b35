// kill -9 of a router in the middle of a failover: its first paid attempt was
// accepted (2xx headers) and stalled past the first-token deadline, so the
// router failed over to the next paid backend — and died there, before
// settling. The surviving router finishes the request from the second
// attempt's intent: the request's row is the second attempt's cost — its
// hold when its provider cannot say (Anthropic, nothing streamed yet), its
// looked-up cost when it can (OpenRouter's generation, the provider's own
// figure) — and the abandoned attempt's estimate (the intent's `abandoned`)
// has a row of its own under its backend and model (`<id>/a1`), as the live
// settle books it; the day counts exactly the two rows.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { usageCostMicro, worstCaseMicro, type TokenPrice } from "@switchyard/db";
import { budgetDay, intentProgressKey, intentStreamKey, RedisBudgetStore } from "@switchyard/state";
import { promptTokensUpperBound } from "../../apps/router/src/billing/estimate.ts";
import type { PaidIntent } from "../../apps/router/src/billing/orphans.ts";
import { FakeAnthropic } from "../fixtures/fake-anthropic.ts";
import { FakeOpenRouter } from "../fixtures/fake-openrouter.ts";
import { createTestDb, createTestRedis, waitFor, type TestDb, type TestRedis } from "../helpers/env.ts";
import { spawnRouter, type RouterProc } from "../helpers/router-proc.ts";
import { CLAIM_IDLE_MS, routerEnv, seedTenant } from "./crash-helpers.ts";

const OR_MODEL = "openai/gpt-4o-mini";
const AN_MODEL = "claude-3-5-haiku-latest";
const OR_PRICE: TokenPrice = { inputMicroPerMtok: 15_000_000n, outputMicroPerMtok: 60_000_000n };
const AN_PRICE: TokenPrice = { inputMicroPerMtok: 80_000_000n, outputMicroPerMtok: 400_000_000n };
/**
 * The first attempt stalls past this; the second, stalled too, has as long
 * again before its own deadline would settle it: the window in which the
 * test sees it in flight and kills the router (wide for a loaded 2-core box).
 */
const FIRST_TOKEN_MS = 2_000;
/** Room for a stall, a failover and the kill; the hold outlives it, as it must. */
const TOTAL_MS = 6_000;
const HOLD_TTL_MS = 6_500;
const MAX_TOKENS = 100;
/** The fakes stall far longer than any deadline here: the router's deadline, or its death, ends the attempt. */
const STALL_MS = 30_000;

let db: TestDb;
let redis: TestRedis;
let openrouter: FakeOpenRouter;
let anthropic: FakeAnthropic;
let env: Record<string, string>;
let survivor: RouterProc;
const victims: RouterProc[] = [];
const tenants: Record<"orFirst" | "anFirst", { tenantId: number; key: string }> = {} as never;

beforeAll(async () => {
  db = await createTestDb();
  redis = await createTestRedis();
  openrouter = await new FakeOpenRouter({ apiKey: "sk-or-fo" }).start();
  anthropic = await new FakeAnthropic("sk-ant-fo").start();
  // Both prices (each seed sets one), before any router starts.
  tenants.orFirst = await seedTenant(db, "or-first", 1_000n, { backend: "openrouter", model: OR_MODEL, ...OR_PRICE });
  tenants.anFirst = await seedTenant(db, "an-first", 1_000n, { backend: "anthropic", model: AN_MODEL, ...AN_PRICE });
  env = {
    ...routerEnv(db, redis, openrouter, "sk-or-fo"),
    ANTHROPIC_API_KEY: "sk-ant-fo",
    SWITCHYARD_PROVIDERS__ANTHROPIC__BASE_URL: anthropic.url,
    SWITCHYARD_BILLING__HOLD_TTL_MS: String(HOLD_TTL_MS),
    SWITCHYARD_DEADLINES__TOTAL_MS: String(TOTAL_MS),
    SWITCHYARD_DEADLINES__FIRST_TOKEN_MS: String(FIRST_TOKEN_MS),
    // One model on both providers: OpenRouter first (the default chain), Anthropic first for `an-first`.
    SWITCHYARD_ROUTING__MODELS: JSON.stringify({ paid: { openrouter: OR_MODEL, anthropic: AN_MODEL } }),
    SWITCHYARD_ROUTING__TENANT_CHAINS: JSON.stringify({ "an-first": ["anthropic", "openrouter"] }),
  };
  survivor = await spawnRouter(env, "survivor");
}, 180_000);

afterAll(async () => {
  await Promise.all(victims.map((v) => v.kill9()));
  await survivor?.stop();
  await openrouter?.stop();
  await anthropic?.stop();
  await db?.drop();
  await redis?.cleanup();
});

function bodyOf(content: string): Record<string, unknown> {
  return { model: "paid", stream: true, max_tokens: MAX_TOKENS, messages: [{ role: "user", content }] };
}

const post = (router: RouterProc, key: string, body: Record<string, unknown>) =>
  fetch(`${router.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: JSON.stringify(body),
  });

/**
 * What an accepted attempt cut before its first token owes, as FINANCE.md
 * defines it (worked out here, not read from the router): the prompt's byte
 * bound ÷ 3 rounded up at the input price, nothing generated, ≥ 1.
 */
function promptEstimate(body: Record<string, unknown>, price: TokenPrice): bigint {
  const micro = usageCostMicro({ promptTokens: Math.ceil(promptTokensUpperBound("/v1/chat/completions", body) / 3), completionTokens: 0 }, price);
  return micro > 0n ? micro : 1n;
}

/** The attempt's own worst case, as its hold is worked out (no images, no hour cache). */
const worstOf = (body: Record<string, unknown>, price: TokenPrice) => worstCaseMicro(promptTokensUpperBound("/v1/chat/completions", body), MAX_TOKENS, price);

/** The intents still in the journal (open attempts of any router), oldest first. */
async function liveIntents(): Promise<Array<{ id: string; intent: PaidIntent }>> {
  const entries = await redis.redis.xrange(intentStreamKey(redis.prefix), "-", "+");
  return entries.map(([id, fields]) => ({ id, intent: JSON.parse(fields[fields.indexOf("i") + 1]!) as PaidIntent }));
}

const today = () => budgetDay(Date.now(), "UTC");

/** The tenant's rows, the request's own first (its abandoned attempts' are `<id>/a<n>`). */
async function rowsOf(requestId: string, tenantId: number) {
  await waitFor(async () => (await db.sql`select 1 from spend_ledger where request_id = ${requestId}`).length > 0, {
    // The hold's TTL from the second attempt's start, the take-over idle time, a scan, slack for a loaded box.
    timeoutMs: HOLD_TTL_MS + CLAIM_IDLE_MS + 15_000,
    intervalMs: 100,
    what: `the killed request's row (${requestId})`,
  });
  return db.sql<{ request_id: string; backend: string; model: string; status: string; cost_micro: string; cost_source: string; provider_generation_id: string | null; completion_tokens: number; prompt_tokens: number; started_at: Date }[]>`
    select request_id, backend, model, status, cost_micro::text, cost_source, provider_generation_id, completion_tokens, prompt_tokens, started_at from spend_ledger where tenant_id = ${tenantId} order by request_id`;
}

describe("kill -9 after failing over from an accepted paid attempt", () => {
  it("to Anthropic, stalled too: the orphan is finished at Anthropic's own hold, and OpenRouter's prompt estimate on a row of its own under OpenRouter; the day counts both once", async () => {
    const { tenantId, key } = tenants.orFirst;
    const store = new RedisBudgetStore(redis.redis, redis.prefix);
    const victim = await spawnRouter(env, "victim-or-first");
    victims.push(victim);
    const body = bodyOf("an OpenRouter stall, then an Anthropic stall, then a kill");
    openrouter.enqueue({ kind: "stall", stallMs: STALL_MS });
    anthropic.enqueue({ kind: "stall", stallMs: STALL_MS });
    // No token ever comes: the connection dies with the router, answered or not.
    const answered = post(victim, key, body).then((r) => r.text()).catch(() => undefined);
    // In flight on Anthropic, OpenRouter's intent retired in favour of Anthropic's (which carries its cost).
    const live = await waitFor(
      async () => {
        const l = await liveIntents();
        return l.length === 1 && l[0]!.intent.backend === "anthropic" && anthropic.inFlight > 0 ? l[0]! : undefined;
      },
      { timeoutMs: 15_000, intervalMs: 20, what: "the failover's Anthropic attempt in flight, its intent the only one" },
    );
    const abandoned = promptEstimate(body, OR_PRICE);
    const hold = worstOf(body, AN_PRICE) + abandoned;
    expect(live.intent).toMatchObject({ tenantId, backend: "anthropic", model: AN_MODEL, abandonedMicro: abandoned.toString(), holdMicro: hold.toString(), held: true });
    expect(live.intent.abandoned).toEqual([{ n: 1, backend: "openrouter", model: OR_MODEL, micro: abandoned.toString(), prompt: Math.ceil(promptTokensUpperBound("/v1/chat/completions", body) / 3), completion: 0, status: "timeout", endedAtMs: expect.any(Number) }]);
    // The request's one hold is the second attempt's worst case plus what the first owes, not the two holds stacked.
    expect((await store.snapshot(tenantId, today())).heldMicro).toBe(hold);
    await victim.kill9();
    await answered;

    const rows = await rowsOf(live.intent.requestId, tenantId);
    expect(rows).toHaveLength(2);
    // Anthropic cannot say what an attempt cost before its usage arrives: its own hold, its worst case …
    expect(rows[0]).toMatchObject({ request_id: live.intent.requestId, backend: "anthropic", model: AN_MODEL, status: "error", cost_source: "hold_on_crash" });
    expect(BigInt(rows[0]!.cost_micro)).toBe(worstOf(body, AN_PRICE));
    // … and what OpenRouter is owed stays OpenRouter's, on the request's day.
    expect(rows[1]).toMatchObject({ request_id: `${live.intent.requestId}/a1`, backend: "openrouter", model: OR_MODEL, status: "timeout", cost_source: "estimate", completion_tokens: 0, provider_generation_id: null, started_at: rows[0]!.started_at });
    expect(BigInt(rows[1]!.cost_micro)).toBe(abandoned);
    await waitFor(async () => (await store.snapshot(tenantId, today())).heldMicro === 0n, { what: "no hold left" });
    expect(await store.snapshot(tenantId, today())).toMatchObject({ spentMicro: hold, heldMicro: 0n });
    expect(await redis.redis.xlen(intentStreamKey(redis.prefix))).toBe(0);
  }, 90_000);

  it("to OpenRouter, mid-stream: the orphan is finished at OpenRouter's looked-up cost, and Anthropic's prompt estimate on a row of its own under Anthropic; the day counts both once", async () => {
    const { tenantId, key } = tenants.anFirst;
    const store = new RedisBudgetStore(redis.redis, redis.prefix);
    const victim = await spawnRouter(env, "victim-an-first");
    victims.push(victim);
    const body = bodyOf("an Anthropic stall, then an OpenRouter stream, then a kill");
    anthropic.enqueue({ kind: "stall", stallMs: STALL_MS });
    // Long enough to be cut by the kill: 100 tokens, 100 ms apart.
    openrouter.enqueue({ kind: "slow", interTokenMs: 100, completionTokens: 100 });
    const res = await post(victim, key, body);
    expect(res.status).toBe(200);
    expect(res.headers.get("x-switchyard-backend")).toBe(`openrouter:${OR_MODEL}`);
    const reader = res.body!.getReader();
    let text = "";
    while ((text.match(/^data: /gm) ?? []).length < 2) {
      const next = await reader.read();
      if (next.done) throw new Error("the stream ended early");
      text += new TextDecoder().decode(next.value, { stream: true });
    }
    // The generation id noted beside OpenRouter's intent, the only one left: the finisher has something to look up.
    const live = await waitFor(
      async () => {
        const l = await liveIntents();
        if (l.length !== 1 || l[0]!.intent.backend !== "openrouter") return undefined;
        const note = await redis.redis.get(intentProgressKey(redis.prefix, l[0]!.id));
        const generationId = note ? (JSON.parse(note) as { generationId?: string }).generationId : undefined;
        return generationId ? { ...l[0]!, generationId } : undefined;
      },
      { timeoutMs: 5_000, intervalMs: 20, what: "OpenRouter's intent, alone, with its generation id noted" },
    );
    const abandoned = promptEstimate(body, AN_PRICE);
    const hold = worstOf(body, OR_PRICE) + abandoned;
    expect(live.intent).toMatchObject({ tenantId, backend: "openrouter", model: OR_MODEL, abandonedMicro: abandoned.toString(), holdMicro: hold.toString(), held: true });
    expect((await store.snapshot(tenantId, today())).heldMicro).toBe(hold);
    await victim.kill9();
    await reader.read().then(
      () => undefined,
      () => undefined,
    );
    // OpenRouter books the cut-short generation: what it charged is what the finisher will look up.
    await waitFor(() => openrouter.generations.get(live.generationId)?.cancelled, { what: "OpenRouter's cut-short generation" });
    const charged = openrouter.chargedMicro([live.generationId]);
    expect(charged).toBeGreaterThan(0n);

    const rows = await rowsOf(live.intent.requestId, tenantId);
    expect(rows).toHaveLength(2);
    // OpenRouter's row is the generation's own looked-up cost: equal to its invoice line.
    expect(rows[0]).toMatchObject({ request_id: live.intent.requestId, backend: "openrouter", model: OR_MODEL, status: "error", cost_source: "provider_lookup", provider_generation_id: live.generationId });
    expect(BigInt(rows[0]!.cost_micro)).toBe(charged);
    // The abandoned Anthropic prompt is Anthropic's, once.
    expect(rows[1]).toMatchObject({ request_id: `${live.intent.requestId}/a1`, backend: "anthropic", model: AN_MODEL, status: "timeout", cost_source: "estimate", completion_tokens: 0, started_at: rows[0]!.started_at });
    expect(BigInt(rows[1]!.cost_micro)).toBe(abandoned);
    // Per backend, as finance reads it: OpenRouter's line has the request and the invoice's amount; Anthropic's the estimate and no request.
    const daily = await db.sql<{ backend: string; requests: string; abandoned_attempts: string; cost_micro: string }[]>`
      select backend, requests::text, abandoned_attempts::text, cost_micro::text from spend_daily where tenant_id = ${tenantId} order by backend`;
    expect(daily).toEqual([
      { backend: "anthropic", requests: "0", abandoned_attempts: "1", cost_micro: abandoned.toString() },
      { backend: "openrouter", requests: "1", abandoned_attempts: "0", cost_micro: charged.toString() },
    ]);
    await waitFor(async () => (await store.snapshot(tenantId, today())).heldMicro === 0n, { what: "no hold left" });
    expect(await store.snapshot(tenantId, today())).toMatchObject({ spentMicro: charged + abandoned, heldMicro: 0n });
    expect(await redis.redis.xlen(intentStreamKey(redis.prefix))).toBe(0);
  }, 90_000);
});
