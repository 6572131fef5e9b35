// `switchyard limits set|show|clear|list` end to end against a real Postgres
// database: what it stores, what it prints, and the values it refuses.
import { execFile } from "node:child_process";
import path from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createKey, createTenant, revokeKey, tenantRateLimits } from "@switchyard/db";
import { createTestDb, type TestDb } from "../helpers/env.ts";

const run = promisify(execFile);
const bin = path.resolve(import.meta.dirname, "../../apps/cli/bin/switchyard.mjs");
let db: TestDb;

async function sy(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  const env: Record<string, string | undefined> = { ...process.env, DATABASE_URL: db.url };
  for (const k of ["REDIS_URL", "SWITCHYARD_REDIS__URL", "SWITCHYARD_REDIS__KEY_PREFIX", "SWITCHYARD_CONFIG"]) delete env[k];
  try {
    const out = await run(process.execPath, [bin, ...args], { env, timeout: 30_000 });
    return { code: 0, stdout: out.stdout, stderr: out.stderr };
  } catch (err) {
    const e = err as { code: number; stdout: string; stderr: string };
    return { code: e.code, stdout: e.stdout, stderr: e.stderr };
  }
}

beforeAll(async () => {
  db = await createTestDb();
});
afterAll(async () => {
  await db?.drop();
});

describe("switchyard limits", () => {
  it("sets, shows and clears a tenant's and a key's limits, and refuses negative or absurd values", { timeout: 180_000 }, async () => {
    const t = await createTenant(db.db, "limited");
    if (!t.ok) throw new Error("tenant");
    const { row: key } = await createKey(db.db, t.tenant.id);

    const set = await sy(["limits", "set", "limited", "--rpm", "100", "--tpm", "50000"]);
    expect(set.code, set.stderr).toBe(0);
    expect(set.stdout).toContain("rate limit of limited: 100 requests, 50000 tokens per minute");
    // One dimension at a time leaves the other as it was.
    expect((await sy(["limits", "set", "limited", "--rpm", "120"])).code).toBe(0);
    expect((await sy(["limits", "set", "limited", "--key", key.prefix, "--tpm", "1000"])).code).toBe(0);
    expect((await tenantRateLimits(db.db, t.tenant.id)).map((r) => [r.keyPrefix, r.requestsPerMinute, r.tokensPerMinute])).toEqual([
      ["", 120, 50000],
      [key.prefix, null, 1000],
    ]);
    const show = await sy(["limits", "show", "limited"]);
    expect(show.code).toBe(0);
    expect(show.stdout).toMatch(/\(tenant\)\s+120\s+50000/);
    expect(show.stdout).toMatch(new RegExp(`${key.prefix}\\s+-\\s+1000`));
    const list = await sy(["limits", "list"]);
    expect(list.stdout).toMatch(/limited\s+\(tenant\)\s+120/);
    // 'none' lifts one dimension.
    expect((await sy(["limits", "set", "limited", "--tpm", "none"])).code).toBe(0);
    expect((await tenantRateLimits(db.db, t.tenant.id))[0]).toMatchObject({ requestsPerMinute: 120, tokensPerMinute: null });

    const bad: [string[], RegExp][] = [
      [["--rpm=-5"], /--rpm takes a whole number from 1 to 10000000/],
      [["--tpm", "-1"], /--tpm/],
      [["--rpm", "0"], /at least 1 \(to stop a key, revoke it/],
      [["--rpm", "1.5"], /whole number/],
      [["--rpm", "1e3"], /whole number/],
      [["--rpm", "99999999999"], /beyond what a limit can be \(at most 10000000\)/],
      [["--tpm", "99999999999999"], /at most 10000000000/],
      [[], /give --rpm N, --tpm N or both/],
      [["--rpm", "5", "--key", "not-a-prefix"], /--key takes a key's visible prefix/],
    ];
    for (const [extra, msg] of bad) {
      const res = await sy(["limits", "set", "limited", ...extra]);
      expect(res.code, extra.join(" ")).toBe(2);
      expect(res.stderr, extra.join(" ")).toMatch(msg);
    }
    const unknownKey = await sy(["limits", "set", "limited", "--rpm", "5", "--key", "sy_00000000"]);
    expect(unknownKey.code).toBe(1);
    expect(unknownKey.stderr).toContain("has no key sy_00000000");
    const { row: gone } = await createKey(db.db, t.tenant.id);
    await revokeKey(db.db, gone.prefix);
    const revoked = await sy(["limits", "set", "limited", "--rpm", "5", "--key", gone.prefix]);
    expect([revoked.code, revoked.stderr]).toEqual([1, expect.stringContaining(`key ${gone.prefix} of limited is revoked`)]);
    expect((await sy(["limits", "set", "nobody", "--rpm", "5"])).code).toBe(1);
    // Nothing refused was stored.
    expect((await tenantRateLimits(db.db, t.tenant.id)).map((r) => r.requestsPerMinute)).toEqual([120, null]);

    expect((await sy(["limits", "clear", "limited", "--key", key.prefix])).stdout).toContain(`cleared the rate limit of key ${key.prefix} of limited`);
    expect((await sy(["limits", "clear", "limited", "--key", key.prefix])).code).toBe(1);
    expect((await sy(["limits", "clear", "limited"])).code).toBe(0);
    expect((await sy(["limits", "show", "limited"])).stdout).toContain("limited has no rate limits");
  });
});
