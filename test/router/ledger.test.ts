// Every dispatched request lands on the spend ledger exactly once, with its
// tokens and how it ended; a stream whose client didn't ask for usage still
// gets it recorded without seeing the usage chunk.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SimWorker } from "#testkit/sim-worker";
import { startTestRouter, type RouterFixture } from "../helpers/router.ts";
import { waitFor } from "../helpers/env.ts";

let fx: RouterFixture;
const workers: SimWorker[] = [];

beforeAll(async () => {
  fx = await startTestRouter();
  workers.push(await new SimWorker({ id: "ledger-ok", models: ["ok-model"], registry: fx.registry, behavior: { tokens: 4 } }).start());
  workers.push(await new SimWorker({ id: "ledger-bad", models: ["bad-model"], registry: fx.registry, behavior: { failStatus: 500 } }).start());
  workers.push(await new SimWorker({ id: "ledger-slow", models: ["slow-model"], registry: fx.registry, behavior: { tokens: 500, interTokenMs: 20 } }).start());
  await waitFor(() => fx.router.deps.directory.all().length === 3);
});

afterAll(async () => {
  await Promise.all(workers.map((w) => w.stop()));
  await fx?.close();
});

const post = (body: Record<string, unknown>, signal?: AbortSignal) =>
  fetch(`${fx.router.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${fx.key}`, "content-type": "application/json" },
    body: JSON.stringify({ messages: [{ role: "user", content: "hi" }], ...body }),
    signal,
  });

async function ledgerRow(requestId: string) {
  await fx.router.deps.guard.flush();
  const rows = await fx.db.sql`select * from spend_ledger where request_id = ${requestId}`;
  return rows;
}

describe("spend ledger", () => {
  it("records a non-streamed request once, with usage, cost 0 from the price table", async () => {
    const res = await post({ model: "ok-model" });
    expect(res.status).toBe(200);
    await res.text();
    const rows = await ledgerRow(res.headers.get("x-request-id")!);
    expect(rows).toHaveLength(1);
    expect(rows[0]).toMatchObject({ tenant_id: String(fx.tenantId), backend: "worker", worker: "ledger-ok", model: "ok-model", prompt_tokens: 7, completion_tokens: 4, cost_micro: "0", cost_source: "price_table", status: "ok" });
    expect(Number(rows[0]!.duration_ms)).toBeGreaterThanOrEqual(0);
  });

  it("records a stream's usage even when the client didn't ask for it, without showing it the usage chunk", async () => {
    const res = await post({ model: "ok-model", stream: true });
    const text = await res.text();
    expect(text).not.toContain('"usage"');
    expect(text.trim().endsWith("data: [DONE]")).toBe(true);
    const rows = await waitFor(async () => {
      const r = await ledgerRow(res.headers.get("x-request-id")!);
      return r.length ? r : undefined;
    });
    expect(rows).toHaveLength(1);
    expect(rows[0]).toMatchObject({ status: "ok", prompt_tokens: 7, completion_tokens: 4 });
    expect(rows[0]!.ttft_ms).not.toBeNull();
    // A client that asks still gets the usage chunk.
    const asked = await (await post({ model: "ok-model", stream: true, stream_options: { include_usage: true } })).text();
    expect(asked).toContain('"usage"');
  });

  it("records failures and client disconnects with their status", async () => {
    const bad = await post({ model: "bad-model" });
    expect(bad.status).toBe(502);
    expect((await ledgerRow(bad.headers.get("x-request-id")!))[0]).toMatchObject({ status: "error", worker: "ledger-bad" });

    const ac = new AbortController();
    const slow = await post({ model: "slow-model", stream: true }, ac.signal);
    const id = slow.headers.get("x-request-id")!;
    await slow.body!.getReader().read();
    ac.abort();
    const rows = await waitFor(async () => {
      const r = await ledgerRow(id);
      return r.length ? r : undefined;
    });
    expect(rows).toHaveLength(1);
    expect(rows[0]).toMatchObject({ status: "client_cancelled", worker: "ledger-slow" });
  });

  it("never records a request twice", async () => {
    const ids: string[] = [];
    for (let i = 0; i < 10; i++) {
      const r = await post({ model: "ok-model", stream: i % 2 === 0 });
      await r.text();
      ids.push(r.headers.get("x-request-id")!);
    }
    await fx.router.deps.guard.flush();
    const rows = await fx.db.sql`select request_id, count(*)::int as n from spend_ledger where request_id = any(${ids}) group by request_id`;
    expect(rows).toHaveLength(10);
    expect(rows.every((r) => r.n === 1)).toBe(true);
  });
});
