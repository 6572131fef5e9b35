// Shared by the router-crash money tests: a tenant with a budget and a price,
// two router processes on one Redis + Postgres with short holds, paid streams
// opened and read a little, and `switchyard budgets reconcile` as users run it.
import { spawn } from "node:child_process";
import path from "node:path";
import { createKey, createTenant, setBudget, setPrice } from "@switchyard/db";
import type { FakeOpenRouter } from "../fixtures/fake-openrouter.ts";
import { REDIS_URL, type TestDb, type TestRedis } from "../helpers/env.ts";

export const MODEL = "openai/gpt-4o-mini";
/** Short holds keep the tests fast; the total deadline stays below them, as it must. */
export const HOLD_TTL_MS = 3_000;
export const TOTAL_MS = 2_500;
export const CLAIM_IDLE_MS = 1_000;
export const ORPHAN_SCAN_MS = 250;

export async function seedTenant(db: TestDb, name: string, dailyLimitCents = 1_000n): Promise<{ tenantId: number; key: string }> {
  const t = await createTenant(db.db, name);
  if (!t.ok) throw new Error("tenant");
  const key = (await createKey(db.db, t.tenant.id)).key;
  await setBudget(db.db, { tenantId: t.tenant.id, dailyLimitCents });
  // The table's price bounds the hold, far above what the fake charges ($0.137 / $0.593 per Mtok).
  await setPrice(db.db, { backend: "openrouter", model: MODEL, inputMicroPerMtok: 15_000_000n, outputMicroPerMtok: 60_000_000n });
  return { tenantId: t.tenant.id, key };
}

export function routerEnv(db: TestDb, redis: TestRedis, fake: FakeOpenRouter, apiKey: string): Record<string, string> {
  return {
    DATABASE_URL: db.url,
    REDIS_URL,
    SWITCHYARD_REDIS__KEY_PREFIX: redis.prefix,
    OPENROUTER_API_KEY: apiKey,
    SWITCHYARD_PROVIDERS__OPENROUTER__BASE_URL: fake.url,
    SWITCHYARD_BILLING__HOLD_TTL_MS: String(HOLD_TTL_MS),
    SWITCHYARD_DEADLINES__TOTAL_MS: String(TOTAL_MS),
    SWITCHYARD_BILLING__LEDGER_CLAIM_IDLE_MS: String(CLAIM_IDLE_MS),
    SWITCHYARD_BILLING__ORPHAN_SCAN_MS: String(ORPHAN_SCAN_MS),
  };
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
