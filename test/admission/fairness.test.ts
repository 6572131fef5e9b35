// Inside a band, tenants take turns: one tenant's flood waits its turns, it
// does not push everyone else's requests behind it.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { waitFor } from "../helpers/env.ts";
import { call, settleDown, startHarness, waiting, type Call, type Harness } from "./harness.ts";

let h: Harness;

beforeAll(async () => {
  h = await startHarness(["flood", "small", "third"], {});
});

afterAll(async () => {
  await h?.close();
});

describe("round-robin inside a band", () => {
  it("tenant A floods 30 requests, B sends 3 and C 2 after it: they are interleaved, not starved", async () => {
    // One decode slot: requests run one at a time, so the order they end in is the order they were admitted.
    const w = await h.sim({ id: "rr", slots: 1 });
    const calls: Call[] = [];
    try {
      const holder = call(h, "flood", { hold: true });
      calls.push(holder);
      await waitFor(() => w.inFlight === 1, { what: "holder running" });
      // One at a time, so their arrival order is known.
      for (let i = 0; i < 30; i++) {
        calls.push(call(h, "flood", { label: `A${i}` }));
        await waitFor(() => waiting(h, "standard") === i + 1, { what: () => `A${i} queued (${waiting(h, "standard")})` });
      }
      // B's first request, then C's: the order the two join the ring.
      calls.push(call(h, "small", { label: "B0" }));
      await waitFor(() => waiting(h, "standard") === 31, { what: "B0 queued" });
      calls.push(call(h, "third", { label: "C0" }));
      await waitFor(() => waiting(h, "standard") === 32, { what: "C0 queued" });
      calls.push(call(h, "small", { label: "B1" }), call(h, "small", { label: "B2" }), call(h, "third", { label: "C1" }));
      await waitFor(() => waiting(h, "standard") === 35, { what: "B's and C's queued behind" });
      holder.abort();

      const queued = calls.slice(1);
      const results = await Promise.all(queued.map(async (c) => ({ c, r: await c.done })));
      for (const { r } of results) expect(r.status).toBe(200);
      const order = results.sort((a, b) => a.r.endAt - b.r.endAt).map(({ c }) => c.tenant[0]!.toUpperCase());
      // A, B and C each take one turn per round while they have requests waiting.
      expect(order.slice(0, 8).join("")).toBe("FSTFSTFS");
      expect(order.slice(8).every((t) => t === "F")).toBe(true);
      // Within a tenant, first in first out.
      const aOrder = results.filter(({ c }) => c.tenant === "flood").map(({ c }) => c.label);
      expect(aOrder).toEqual(Array.from({ length: 30 }, (_, i) => `A${i}`));
    } finally {
      await settleDown(h, calls, [w]);
      await h.stopSims();
    }
  });
});
