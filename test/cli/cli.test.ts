// The `switchyard` command end to end against a real Postgres database.
import { execFile } from "node:child_process";
import path from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createTestDb, type TestDb } from "../helpers/env.ts";

const run = promisify(execFile);
const bin = path.resolve(import.meta.dirname, "../../apps/cli/bin/switchyard.mjs");
let db: TestDb;

async function sy(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    const r = await run(process.execPath, [bin, ...args], { env: { ...process.env, DATABASE_URL: db.url }, timeout: 30_000 });
    return { code: 0, stdout: r.stdout, stderr: r.stderr };
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

describe("switchyard CLI", () => {
  it("manages tenants and keys: create, list, revoke", async () => {
    expect((await sy(["migrate"])).stdout).toMatch(/migrations applied/);
    const created = await sy(["tenants", "create", "initech"]);
    expect(created.code).toBe(0);
    expect((await sy(["tenants", "create", "initech"])).code).toBe(1);
    const key = await sy(["keys", "create", "--tenant", "initech", "--name", "ci"]);
    expect(key.code).toBe(0);
    const full = key.stdout.trim();
    expect(full).toMatch(/^sy_[0-9a-f]{8}_[A-Za-z0-9_-]{43}$/);
    const prefix = full.slice(0, 11);
    const list = await sy(["keys", "list", "--tenant", "initech"]);
    expect(list.stdout).toContain(prefix);
    expect(list.stdout).not.toContain(full); // shown once, never again
    expect(list.stdout).toMatch(/active/);
    expect((await sy(["tenants", "list"])).stdout).toMatch(/initech\s+\d+\s+1/);
    // --tenant names whose key it must be: another tenant's prefix is refused, not revoked.
    expect((await sy(["tenants", "create", "globex"])).code).toBe(0);
    const wrong = await sy(["keys", "revoke", prefix, "--tenant", "globex"]);
    expect([wrong.code, wrong.stderr]).toEqual([1, expect.stringMatching(/no key with prefix 'sy_[0-9a-f]{8}' for tenant globex/)]);
    expect((await sy(["keys", "list", "--tenant", "initech"])).stdout).toMatch(/active/);
    expect((await sy(["keys", "revoke", prefix, "--tenant", "initech"])).stdout).toMatch(/revoked/);
    expect((await sy(["keys", "revoke", prefix])).stdout).toMatch(/already revoked/);
    expect((await sy(["keys", "list", "--tenant", "initech"])).stdout).toMatch(/revoked/);
    expect((await sy(["keys", "revoke", "sy_ffffffff"])).code).toBe(1);
  });

  it("spend prints real ledger rows, as a table and as CSV, exact to the micro-cent", async () => {
    const t = (await db.sql`select id from tenants where name = 'initech'`)[0]!;
    const day = "2026-11-29";
    for (const [i, cost] of [[1, "12300"], [2, "1"], [3, "99999999"]] as const) {
      await db.sql`insert into spend_ledger (request_id, tenant_id, backend, model, prompt_tokens, completion_tokens, cost_micro, cost_source, status, started_at, finished_at, duration_ms)
        values (${`req-${i}`}, ${t.id}, 'openrouter', 'm1', 10, 5, ${cost}, 'provider', 'ok', ${`${day}T12:00:00Z`}, ${`${day}T12:00:01Z`}, 1000)`;
    }
    // A paid attempt request 3 failed over from after OpenRouter accepted it: its own row (FINANCE.md), cost in the line, not a request.
    await db.sql`insert into spend_ledger (request_id, tenant_id, backend, model, prompt_tokens, completion_tokens, cost_micro, cost_source, status, started_at, finished_at, duration_ms)
      values ('req-3/a1', ${t.id}, 'openrouter', 'm1', 10, 0, 7, 'estimate', 'timeout', ${`${day}T12:00:00Z`}, ${`${day}T12:00:01Z`}, 1000)`;
    const table = await sy(["spend", "--from", day, "--to", day, "--tenant", "initech"]);
    expect(table.code).toBe(0);
    expect(table.stdout).toMatch(/2026-11-29\s+initech\s+3\s+40\s+15\s+100012307\s+1\.00012307\s+0\s+0\s+1\n/);
    const csv = await sy(["spend", "--from", day, "--to", day, "--by", "model", "--format", "csv"]);
    expect(csv.stdout.trim().split("\n")).toEqual([
      "day,tenant,backend,model,requests,prompt_tokens,completion_tokens,cost_micro_cents,cost_usd,crash_finished,crash_finished_micro_cents,abandoned_attempts",
      "2026-11-29,initech,openrouter,m1,3,40,15,100012307,1.00012307,0,0,1",
    ]);
    expect((await sy(["spend", "--from", "2026-13-01"])).code).toBe(2);
    expect((await sy(["spend", "--by", "week"])).stderr).toMatch(/--by must be day, backend or model/);
  });

  it("bad arguments exit non-zero with a clear message", async () => {
    const cases: [string[], RegExp][] = [
      [["frobnicate"], /unknown command 'frobnicate'/],
      [["tenants"], /expected 'create NAME' or 'list'/],
      [["tenants", "create"], /missing NAME/],
      [["keys", "create"], /--tenant NAME is required/],
      [["keys", "revoke"], /missing PREFIX/],
      [["keys", "list", "--tenant"], /--tenant/],
      [["--bogus"], /Unknown option/],
      // A flag another command reads is refused, never ignored; so is a stray word.
      [["tenants", "create", "x", "--daily-cents", "5"], /--daily-cents does not apply to 'tenants'/],
      [["spend", "--day", "2026-01-01"], /--day does not apply to 'spend'/],
      [["up", "--port", "8080"], /--port does not apply to 'up' \(the router's port is router\.port/],
      [["up", "--model", "smollm2-135m-instruct", "all-minilm-l6-v2"], /'up' takes no arguments, got 'all-minilm-l6-v2' \(one --model per model\)/],
      [["router", "prod.yaml"], /a config file goes after --config/],
      [["bench", "engine", "--levels", "1"], /--levels does not apply to 'bench engine'/],
      [["keys", "list", "--tenant", "x", "--name", "y"], /--name goes with 'keys create'/],
    ];
    for (const [args, msg] of cases) {
      const r = await sy(args);
      expect(r.code, args.join(" ")).toBe(2);
      expect(r.stderr).toMatch(msg);
      expect(r.stderr.split("\n").length, "one line and a pointer to --help, not the whole usage").toBeLessThan(5);
    }
    // A failure names its cause, not only drizzle's wrapper around it.
    const down = await run(process.execPath, [bin, "tenants", "list"], { env: { ...process.env, DATABASE_URL: "postgres://postgres@127.0.0.1:1/nowhere" } }).catch((e) => e);
    expect(down.code).toBe(1);
    expect(down.stderr).toMatch(/ECONNREFUSED 127\.0\.0\.1:1/);
    const noTenant = await sy(["keys", "create", "--tenant", "nobody"]);
    expect(noTenant.code).toBe(1);
    expect(noTenant.stderr).toMatch(/no tenant named 'nobody'/);
    const badName = await sy(["tenants", "create", "Bad Name!"]);
    expect(badName.code).toBe(1);
    expect(badName.stderr).toMatch(/invalid tenant name/);
  });

  it("an invalid config value stops with the key named", async () => {
    const r = await run(process.execPath, [bin, "tenants", "list"], { env: { ...process.env, DATABASE_URL: db.url, SWITCHYARD_ROUTER__PORT: "nope" } }).catch((e) => e);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/router\.port/);
  });
});
