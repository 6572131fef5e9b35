// The intent script resent: Redis runs a paid attempt's open script, and the
// connection breaks before its reply reaches the router. ioredis (as the
// router connects it: connectRedis, auto-pipelined) reconnects and sends the
// unanswered command again (autoResendUnfulfilledCommands), so Redis runs it
// twice. One intent must come of it — the one the router is told of and will
// retire or finish — not a second that no one retires and that an orphan
// finisher later finishes at its hold. A real Redis behind a TCP proxy that
// drops the connection instead of passing that one reply on.
import net from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { connectRedis, RedisIntentJournal } from "@switchyard/state";
import { createTestRedis, REDIS_URL, type TestRedis } from "../helpers/env.ts";

let redis: TestRedis;
let proxy: net.Server;
/** Set to drop the connection at the next reply Redis sends, instead of passing it on; resolves once it did. */
let cutNextReply: (() => void) | undefined;
const sockets = new Set<net.Socket>();

beforeAll(async () => {
  redis = await createTestRedis();
  const target = new URL(REDIS_URL);
  proxy = net.createServer((client) => {
    const upstream = net.connect(Number(target.port || 6379), target.hostname);
    for (const s of [client, upstream]) {
      sockets.add(s);
      s.on("close", () => sockets.delete(s));
      s.on("error", () => {});
    }
    client.pipe(upstream);
    upstream.on("data", (chunk: Buffer) => {
      const cut = cutNextReply;
      if (!cut) return void client.write(chunk);
      cutNextReply = undefined;
      client.destroy();
      upstream.destroy();
      cut();
    });
    upstream.on("close", () => client.destroy());
    client.on("close", () => upstream.destroy());
  });
  await new Promise<void>((r) => proxy.listen(0, "127.0.0.1", r));
});

afterAll(async () => {
  for (const s of sockets) s.destroy();
  await new Promise<void>((r) => proxy?.close(() => r()));
  await redis?.cleanup();
});

describe("a paid attempt's intent script resent after its reply was lost", () => {
  it("Redis ran it twice: one intent, the one the router was told of, pending on it", async () => {
    const port = (proxy.address() as net.AddressInfo).port;
    const client = connectRedis(`redis://127.0.0.1:${port}`, { autoPipelining: true });
    try {
      const journal = new RedisIntentJournal(client, { prefix: redis.prefix, ledgerKey: `${redis.prefix}{ledger}:stream`, consumer: "router-a", claimIdleMs: 60_000 });
      // The script is loaded (EVALSHA answers at once from now on) and the group made.
      await journal.retire(await journal.open('{"requestId":"req_warm"}', "req_warm:1", 60_000));
      expect(await journal.depth()).toBe(0);

      const cut = new Promise<void>((r) => (cutNextReply = r));
      const id = await journal.open('{"requestId":"req_resent"}', "req_resent:1", 60_000);
      await cut; // the reply was lost: what resolved `id` was the resend's

      const entries = await redis.redis.xrange(journal.key, "-", "+");
      expect(entries.map(([entry]) => entry)).toEqual([id]);
      const pending = (await redis.redis.xpending(journal.key, "intents", "-", "+", 10)) as Array<[string, string]>;
      expect(pending.map(([entry, consumer]) => [entry, consumer])).toEqual([[id, "router-a"]]);
      // Retired by the router as any refused attempt's: nothing left for an orphan finisher.
      await journal.retire(id);
      expect(await redis.redis.xlen(journal.key)).toBe(0);
    } finally {
      client.disconnect();
    }
  }, 30_000);
});
