// kill -9 of a router in the middle of paid Anthropic streams: Anthropic has
// no per-message cost lookup and no usage had arrived (it comes with the last
// event), so the surviving router finishes each at its hold — once, marked.
import { describe, expect, it } from "vitest";
import { worstCaseMicro } from "@switchyard/db";
import { budgetDay, RedisBudgetStore } from "@switchyard/state";
import { promptTokensUpperBound } from "../../apps/router/src/billing/estimate.ts";
import { FakeAnthropic } from "../fixtures/fake-anthropic.ts";
import { waitFor } from "../helpers/env.ts";
import { anthropicRouterEnv, CLAIM_IDLE_MS, HOLD_TTL_MS, seedTenant, twoRouters } from "./crash-helpers.ts";

const MODEL = "claude-3-5-haiku-latest";
const PRICE = { inputMicroPerMtok: 80_000_000n, outputMicroPerMtok: 400_000_000n };
const STREAMS = 10;

let fake: FakeAnthropic;
let key: string;
let tenantId: number;

const rig = twoRouters(
  async (db, redis) => {
    fake = await new FakeAnthropic("sk-ant-crash").start();
    fake.defaultScenario = { kind: "slow", interTokenMs: 100, completionTokens: 40 };
    ({ tenantId, key } = await seedTenant(db, "anthropic-crash", 1_000n, { backend: "anthropic", model: MODEL, ...PRICE }));
    return anthropicRouterEnv(db, redis, fake, "sk-ant-crash");
  },
  () => fake?.stop(),
);

describe("kill -9 in the middle of paid Anthropic streams", () => {
  it("each request gets one row at its hold, marked hold_on_crash, and the day is charged once", async () => {
    const { db, redis, a } = rig;
    const contents = Array.from({ length: STREAMS }, (_, i) => `anthropic ${i} ${"z".repeat(i * 5)}`);
    const opened = await Promise.all(
      contents.map(async (content) => {
        const res = await fetch(`${a.url}/v1/chat/completions`, {
          method: "POST",
          headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
          body: JSON.stringify({ model: MODEL, max_tokens: 100, stream: true, messages: [{ role: "user", content }] }),
        });
        expect(res.status).toBe(200);
        const reader = res.body!.getReader();
        let text = "";
        while ((text.match(/^data: /gm) ?? []).length < 3) text += new TextDecoder().decode((await reader.read()).value);
        return { id: res.headers.get("x-request-id")!, content, reader };
      }),
    );
    await a.kill9();
    await Promise.all(opened.map((o) => o.reader.read().then(() => undefined, () => undefined)));
    await waitFor(async () => (await db.sql`select count(*)::int as n from spend_ledger where tenant_id = ${tenantId}`)[0]!.n >= STREAMS, {
      timeoutMs: HOLD_TTL_MS + CLAIM_IDLE_MS + 15_000,
      intervalMs: 100,
      what: "a row for each killed Anthropic request",
    });
    const rows = await db.sql<{ request_id: string; cost_micro: string; cost_source: string; backend: string }[]>`
      select request_id, cost_micro::text, cost_source, backend from spend_ledger where tenant_id = ${tenantId}`;
    expect(rows).toHaveLength(STREAMS);
    const byId = new Map(opened.map((o) => [o.id, o.content]));
    for (const r of rows) {
      expect(r.backend).toBe("anthropic");
      expect(r.cost_source).toBe("hold_on_crash");
      const hold = worstCaseMicro(promptTokensUpperBound("/v1/chat/completions", { messages: [{ role: "user", content: byId.get(r.request_id)! }] }), 100, PRICE);
      expect(BigInt(r.cost_micro)).toBe(hold);
    }
    const ledger = rows.reduce((s, r) => s + BigInt(r.cost_micro), 0n);
    const store = new RedisBudgetStore(redis.redis, redis.prefix);
    expect(await store.snapshot(tenantId, budgetDay(Date.now(), "UTC"))).toMatchObject({ spentMicro: ledger, heldMicro: 0n });
  }, 90_000);
});
