// Shared by the router-crash money tests: a tenant with a budget and a price,
// two router processes on one Redis + Postgres with short holds, paid streams
// opened and read a little, and `switchyard budgets reconcile` as users run it.
import { spawn } from "node:child_process";
import path from "node:path";
import { afterAll, beforeAll } from "vitest";
import { createKey, createTenant, setBudget, setPrice } from "@switchyard/db";
import type { FakeAnthropic } from "../fixtures/fake-anthropic.ts";
import type { FakeOpenRouter } from "../fixtures/fake-openrouter.ts";
import { createTestDb, createTestRedis, REDIS_URL, type TestDb, type TestRedis } from "../helpers/env.ts";
import { spawnRouter, type RouterProc } from "../helpers/router-proc.ts";

export const MODEL = "openai/gpt-4o-mini";
/** Short holds keep the tests fast; the total deadline stays below them, as it must. */
export const HOLD_TTL_MS = 3_000;
export const TOTAL_MS = 2_500;
export const CLAIM_IDLE_MS = 1_000;
export const ORPHAN_SCAN_MS = 250;

// The table's price bounds the hold, far above what the fake charges ($0.137 / $0.593 per Mtok).
const OPENROUTER_PRICE = { backend: "openrouter", model: MODEL, inputMicroPerMtok: 15_000_000n, outputMicroPerMtok: 60_000_000n };

/** A tenant with a key, a daily budget and `price` (by default MODEL's on OpenRouter) in the price table. */
export async function seedTenant(db: TestDb, name: string, dailyLimitCents = 1_000n, price: Parameters<typeof setPrice>[1] = OPENROUTER_PRICE): Promise<{ tenantId: number; key: string }> {
  const t = await createTenant(db.db, name);
  if (!t.ok) throw new Error("tenant");
  const key = (await createKey(db.db, t.tenant.id)).key;
  await setBudget(db.db, { tenantId: t.tenant.id, dailyLimitCents });
  await setPrice(db.db, price);
  return { tenantId: t.tenant.id, key };
}

function crashEnv(db: TestDb, redis: TestRedis): Record<string, string> {
  return {
    DATABASE_URL: db.url,
    REDIS_URL,
    SWITCHYARD_REDIS__KEY_PREFIX: redis.prefix,
    SWITCHYARD_BILLING__HOLD_TTL_MS: String(HOLD_TTL_MS),
    SWITCHYARD_DEADLINES__TOTAL_MS: String(TOTAL_MS),
    SWITCHYARD_BILLING__LEDGER_CLAIM_IDLE_MS: String(CLAIM_IDLE_MS),
    SWITCHYARD_BILLING__ORPHAN_SCAN_MS: String(ORPHAN_SCAN_MS),
  };
}

/** A router process's env: the test's database and Redis prefix, short holds, OpenRouter at the fake. */
export function routerEnv(db: TestDb, redis: TestRedis, fake: FakeOpenRouter, apiKey: string): Record<string, string> {
  return { ...crashEnv(db, redis), OPENROUTER_API_KEY: apiKey, SWITCHYARD_PROVIDERS__OPENROUTER__BASE_URL: fake.url };
}

/** As routerEnv, with Anthropic at the fake. */
export function anthropicRouterEnv(db: TestDb, redis: TestRedis, fake: FakeAnthropic, apiKey: string): Record<string, string> {
  return { ...crashEnv(db, redis), ANTHROPIC_API_KEY: apiKey, SWITCHYARD_PROVIDERS__ANTHROPIC__BASE_URL: fake.url };
}

export interface TwoRouters {
  db: TestDb;
  redis: TestRedis;
  /** router-a: the one the test kills. */
  a: RouterProc;
  b: RouterProc;
}

/**
 * Registers the suite's hooks: a database and a Redis prefix, `setup` on them
 * (starts the fake, seeds; gives the routers' env), then two router processes
 * on that env. Its fields are set once beforeAll has run. After all:
 * router-a killed with -9, router-b stopped, `stopFake`, the database
 * dropped, Redis cleaned.
 */
export function twoRouters(setup: (db: TestDb, redis: TestRedis) => Promise<Record<string, string>>, stopFake: () => Promise<unknown> | undefined): TwoRouters {
  const rig = {} as TwoRouters;
  beforeAll(async () => {
    rig.db = await createTestDb();
    rig.redis = await createTestRedis();
    const env = await setup(rig.db, rig.redis);
    [rig.a, rig.b] = await Promise.all([spawnRouter(env, "router-a"), spawnRouter(env, "router-b")]);
  }, 180_000);
  afterAll(async () => {
    await rig.a?.kill9();
    await rig.b?.stop();
    await stopFake();
    await rig.db?.drop();
    await rig.redis?.cleanup();
  });
  return rig;
}

export interface OpenStream {
  requestId: string;
  reader: ReadableStreamDefaultReader<Uint8Array>;
  /** Resolves when the response has ended (or its connection died). */
  rest: Promise<void>;
}

/** Opens a paid stream and reads until `events` SSE events arrived. */
export async function openStream(url: string, key: string, content: string, events = 2): Promise<OpenStream> {
  const res = await fetch(`${url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: JSON.stringify({ model: MODEL, max_tokens: 100, stream: true, messages: [{ role: "user", content }] }),
  });
  if (res.status !== 200) throw new Error(`stream refused: ${res.status} ${await res.text()}`);
  const requestId = res.headers.get("x-request-id")!;
  const reader = res.body!.getReader();
  const decoder = new TextDecoder();
  let text = "";
  while ((text.match(/^data: /gm) ?? []).length < events) {
    const next = await reader.read();
    if (next.done) throw new Error(`stream ${requestId} ended early`);
    text += decoder.decode(next.value, { stream: true });
  }
  const rest = (async () => {
    try {
      for (;;) if ((await reader.read()).done) return;
    } catch {
      // the connection died with the router
    }
  })();
  return { requestId, reader, rest };
}

/** `switchyard budgets reconcile NAME` against the test's Redis prefix and database. */
export function reconcileCli(db: TestDb, redis: TestRedis, tenant: string): Promise<{ code: number | null; out: string }> {
  const bin = path.resolve(import.meta.dirname, "../../apps/cli/bin/switchyard.mjs");
  const child = spawn(process.execPath, [bin, "budgets", "reconcile", tenant, "--key-prefix", redis.prefix], {
    env: { ...process.env, DATABASE_URL: db.url, REDIS_URL },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let out = "";
  child.stdout.on("data", (d: Buffer) => (out += d.toString()));
  child.stderr.on("data", (d: Buffer) => (out += d.toString()));
  return new Promise((resolve) => child.once("exit", (code) => resolve({ code, out })));
}

/** Micro-cents from a fake generation's USD literal (1 micro-cent = 10⁻⁸ USD). */
export function generationMicro(fake: FakeOpenRouter, id: string): bigint {
  return fake.chargedMicro([id]);
}

/**
 * The intents that carry a paid stream's generation id. The router notes it
 * beside the intent off the request path, once the intent's own write has
 * returned, so a client can read the first chunks before it lands; a router
 * killed before then leaves an orphan with no generation to look up, charged
 * at its hold (test/money/orphan-lookup-fails.test.ts). A test about the
 * lookup kills only once every victim's note is there.
 */
export async function generationNotes(redis: TestRedis): Promise<string[]> {
  const keys = await redis.redis.keys(`${redis.prefix}{ledger}:intent:*`);
  if (keys.length === 0) return [];
  // One round trip for all the intents (one hash slot: {ledger}).
  const values = await redis.redis.mget(...keys);
  return keys.filter((_, i) => values[i]?.includes('"generationId":"gen-'));
}
