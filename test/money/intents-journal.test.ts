// The intents journal on a real single-node Redis and a real Redis Cluster:
// an intent is pending on its router from the moment it is written, a silent
// router's intents are taken over (with their progress), a live router's are
// not, and finishing is exactly once — whoever deletes the intent appends the
// row, the other finds nothing; an intent Redis lost is still finished, with
// its row, by the router serving its request.
import { describe, expect, it } from "vitest";
import { intentFinishedKey, intentProgressKey, RedisIntentJournal, type RedisLike } from "@switchyard/state";
import { createTestRedis, sleep } from "../helpers/env.ts";
import { createClusterRedis } from "../contract/twins.ts";

const CLAIM_IDLE_MS = 150;
/** How long an attempt's opened mark lives (a hold's TTL, in the router). */
const OPENED_TTL_MS = 60_000;

const twins: Array<[string, () => Promise<{ redis: RedisLike; prefix: string; cleanup(): Promise<void> }>]> = [
  ["single-node Redis", createTestRedis],
  ["Redis Cluster", createClusterRedis],
];

describe.each(twins)("RedisIntentJournal on %s", (_, make) => {
  it("pending from the start, taken over only when silent, finished exactly once", async () => {
    const r = await make();
    try {
      const ledgerKey = `${r.prefix}{ledger}:stream`;
      const journal = (consumer: string) => new RedisIntentJournal(r.redis, { prefix: r.prefix, ledgerKey, consumer, claimIdleMs: CLAIM_IDLE_MS });
      const a = journal("a");
      const b = journal("b");
      // No group yet: the open script makes it.
      const id = await a.open('{"requestId":"req_1"}', "req_1:1", OPENED_TTL_MS);
      expect(a.isMine(id)).toBe(true);
      expect(await a.depth()).toBe(1);
      await a.note(id, '{"generationId":"gen-1"}');
      // A live router's intent is not taken.
      expect((await b.claimSilent()).claimed).toEqual([]);
      await sleep(CLAIM_IDLE_MS / 2);
      await a.touch(true);
      await sleep(CLAIM_IDLE_MS / 2 + 20);
      expect((await b.claimSilent()).claimed).toEqual([]);
      // Silent past the idle time: b takes it over, progress included, on Redis' clock.
      await sleep(CLAIM_IDLE_MS + 50);
      const { nowMs, claimed } = await b.claimSilent();
      expect(claimed).toEqual([{ id, intent: '{"requestId":"req_1"}', progress: '{"generationId":"gen-1"}', openedAtMs: Number(id.split("-")[0]) }]);
      expect(nowMs).toBeGreaterThanOrEqual(claimed[0]!.openedAtMs + CLAIM_IDLE_MS);
      expect(b.held).toBe(1);
      // Both finish: one row.
      const results = await Promise.all([a.finish(id, '{"row":"a"}'), b.finish(id, '{"row":"b"}')]);
      expect(results.filter(Boolean)).toHaveLength(1);
      expect(await r.redis.xlen(ledgerKey)).toBe(1);
      expect(await a.finish(id, '{"row":"again"}')).toBe(false);
      expect(await r.redis.xlen(ledgerKey)).toBe(1);
      expect(await a.depth()).toBe(0);
      expect(await r.redis.exists(intentProgressKey(r.prefix, id))).toBe(0);
      // Finished elsewhere: the taken-over copy is forgotten at the next touch.
      await b.touch(true);
      expect(b.held).toBe(0);

      // Retired without a row: gone, note included; nothing left to take over.
      const id2 = await a.open('{"requestId":"req_2"}', "req_2:1", OPENED_TTL_MS);
      await a.note(id2, "{}");
      await a.retire(id2);
      expect(await a.depth()).toBe(0);
      expect(await r.redis.exists(intentProgressKey(r.prefix, id2))).toBe(0);
      await sleep(CLAIM_IDLE_MS + 50);
      expect((await b.claimSilent()).claimed).toEqual([]);
      expect(await r.redis.xlen(ledgerKey)).toBe(1);

      // Redis lost the stream (restart, failover): the next intent makes the group again and is still pending.
      await r.redis.del(a.key);
      const id3 = await a.open('{"requestId":"req_3"}', "req_3:1", OPENED_TTL_MS);
      await sleep(CLAIM_IDLE_MS + 50);
      expect((await b.claimSilent()).claimed.map((c) => c.id)).toEqual([id3]);
      // Dead routers' consumers go once silent and empty; those holding an intent stay.
      const dead = journal("dead");
      await dead.retire(await dead.open('{"requestId":"req_4"}', "req_4:1", OPENED_TTL_MS));
      const id5 = await journal("dead-with-intent").open('{"requestId":"req_5"}', "req_5:1", OPENED_TTL_MS);
      await sleep(CLAIM_IDLE_MS + 50);
      await b.claimSilent(); // b now holds req_3 and req_5: dead-with-intent is empty
      const c = journal("c");
      const id6 = await c.open('{"requestId":"req_6"}', "req_6:1", OPENED_TTL_MS);
      expect(await c.pruneConsumers(CLAIM_IDLE_MS)).toBe(3); // a, dead, dead-with-intent
      const names = ((await r.redis.xinfo("CONSUMERS", a.key, "intents")) as unknown[][]).map((f) => String(f[1])).sort();
      expect(names).toEqual(["b", "c"]);
      // Nothing was dropped: every intent is still pending, so still found once silent.
      await sleep(CLAIM_IDLE_MS + 50);
      expect((await c.claimSilent()).claimed.map((x) => x.id).sort()).toEqual([id3, id5, id6].sort());
      await a.close();
      await b.close();
    } finally {
      await r.cleanup();
    }
  }, 90_000);

  it("the open script sent twice for one attempt (a resend after a reconnect) writes one intent; the request's next attempt gets its own", async () => {
    const r = await make();
    try {
      const a = new RedisIntentJournal(r.redis, { prefix: r.prefix, ledgerKey: `${r.prefix}{ledger}:stream`, consumer: "a", claimIdleMs: CLAIM_IDLE_MS });
      const first = await a.open('{"requestId":"req_twice"}', "req_twice:1", OPENED_TTL_MS);
      const again = await a.open('{"requestId":"req_twice"}', "req_twice:1", OPENED_TTL_MS);
      expect(again).toBe(first);
      expect(await a.depth()).toBe(1);
      // The intent it names is the one pending on this router: retiring it leaves nothing behind.
      const next = await a.open('{"requestId":"req_twice"}', "req_twice:2", OPENED_TTL_MS);
      expect(next).not.toBe(first);
      expect(await a.depth()).toBe(2);
      await a.retire(first);
      await a.retire(next);
      expect(await a.depth()).toBe(0);
      await sleep(CLAIM_IDLE_MS + 50);
      expect((await new RedisIntentJournal(r.redis, { prefix: r.prefix, ledgerKey: `${r.prefix}{ledger}:stream`, consumer: "b", claimIdleMs: CLAIM_IDLE_MS }).claimSilent()).claimed).toEqual([]);
    } finally {
      await r.cleanup();
    }
  }, 90_000);

  it("an intent Redis lost is finished by the router that opened it, with its row; an orphan's finisher leaves a mark so the owner then writes none", async () => {
    const r = await make();
    try {
      const ledgerKey = `${r.prefix}{ledger}:stream`;
      const rows: Array<[string, string[], boolean]> = [];
      const journal = (consumer: string) => new RedisIntentJournal(r.redis, { prefix: r.prefix, ledgerKey, consumer, claimIdleMs: CLAIM_IDLE_MS, written: (entry, texts, lost) => rows.push([entry, texts, lost]) });
      const a = journal("a");
      const b = journal("b");
      // Redis lost the intent (the stream gone with it) while its request ran: the owner still writes the row.
      const lost = await a.open('{"requestId":"req_lost"}', "req_lost:1", OPENED_TTL_MS);
      await r.redis.del(a.key);
      expect(await a.finish(lost, '{"row":"lost"}')).toBe(true);
      const entries = (await r.redis.xrange(ledgerKey, "-", "+")) as Array<[string, string[]]>;
      expect(entries.map(([, f]) => f[1])).toEqual(['{"row":"lost"}']);
      expect(rows).toEqual([[entries[0]![0], ['{"row":"lost"}'], true]]);
      // Finished once: a second finish of the same id writes nothing.
      expect(await a.finish(lost, '{"row":"again"}')).toBe(false);
      // Another router takes a silent intent over and finishes it first: the owner's late finish writes nothing.
      const taken = await a.open('{"requestId":"req_taken"}', "req_taken:1", OPENED_TTL_MS);
      await sleep(CLAIM_IDLE_MS + 50);
      expect((await b.claimSilent()).claimed.map((c) => c.id)).toEqual([taken]);
      // With the rows of the attempts the request failed over from: one entry, the request's row first.
      expect(await b.finish(taken, '{"row":"orphan"}', ['{"row":"orphan/a1"}', '{"row":"orphan/a2"}'])).toBe(true);
      expect(await r.redis.exists(intentFinishedKey(r.prefix, taken))).toBe(1);
      expect(await a.finish(taken, '{"row":"owner late"}')).toBe(false);
      // A router finishing an orphan that is gone writes nothing either, mark or not.
      const gone = await a.open('{"requestId":"req_gone"}', "req_gone:1", OPENED_TTL_MS);
      await sleep(CLAIM_IDLE_MS + 50);
      await b.claimSilent();
      await r.redis.del(a.key);
      expect(await b.finish(gone, '{"row":"orphan of nothing"}')).toBe(false);
      expect((await r.redis.xrange(ledgerKey, "-", "+")) as Array<[string, string[]]>).toEqual([
        [expect.any(String), ["r", '{"row":"lost"}']],
        [expect.any(String), ["r", '{"row":"orphan"}', "r", '{"row":"orphan/a1"}', "r", '{"row":"orphan/a2"}']],
      ]);
      expect(rows.map(([, texts, l]) => [texts, l])).toEqual([
        [['{"row":"lost"}'], true],
        [['{"row":"orphan"}', '{"row":"orphan/a1"}', '{"row":"orphan/a2"}'], false],
      ]);
      // The orphan scan after the stream (and its group) went: refused once, then the group is made again.
      await expect(b.claimSilent()).rejects.toThrow(/NOGROUP/);
      expect((await b.claimSilent()).claimed).toEqual([]);
    } finally {
      await r.cleanup();
    }
  }, 90_000);
});
