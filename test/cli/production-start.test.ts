// A production router never starts half-configured (issue 19), tried as an
// operator would: the CLI as a subprocess, its exit code and its words.
import { execFile, spawn } from "node:child_process";
import { chmodSync, existsSync, mkdirSync, mkdtempSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { promisify } from "node:util";
import postgres from "postgres";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createTestDb, PG_ADMIN_URL, REDIS_URL, uniqueName, waitFor, type TestDb } from "../helpers/env.ts";

const run = promisify(execFile);
const bin = path.resolve(import.meta.dirname, "../../apps/cli/bin/switchyard.mjs");
/** The CI machine's own DATABASE_URL / REDIS_URL must not leak into these runs. */
const clean = { DATABASE_URL: "", REDIS_URL: "", SWITCHYARD_CONFIG: "" };

async function sy(args: string[], env: Record<string, string> = {}, timeout = 60_000): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    const r = await run(process.execPath, [bin, ...args], { env: { ...process.env, ...clean, ...env }, timeout });
    return { code: 0, stdout: r.stdout, stderr: r.stderr };
  } catch (err) {
    const e = err as { code: number; stdout: string; stderr: string };
    return { code: e.code, stdout: e.stdout, stderr: e.stderr };
  }
}

const scratch = mkdtempSync(path.join(tmpdir(), "sy-prod-"));
// mkdtemp makes it 0700; the embedded PostgreSQL (run as `postgres`) must enter it.
chmodSync(scratch, 0o755);
let migrated: TestDb;
/** A database that exists but was never migrated. */
let bareName: string;
let bareUrl: string;

beforeAll(async () => {
  migrated = await createTestDb();
  bareName = uniqueName("bare");
  const admin = postgres(PG_ADMIN_URL, { max: 1, onnotice: () => {} });
  await admin.unsafe(`create database ${bareName}`);
  await admin.end();
  const u = new URL(PG_ADMIN_URL);
  u.pathname = `/${bareName}`;
  bareUrl = u.toString();
});

afterAll(async () => {
  await migrated?.drop();
  const admin = postgres(PG_ADMIN_URL, { max: 1, onnotice: () => {} });
  await admin.unsafe(`drop database if exists ${bareName} with (force)`);
  await admin.end();
  rmSync(scratch, { recursive: true, force: true });
});

describe("switchyard router refuses to start half-configured", () => {
  it("a misspelt key in the config file stops it with exit 2 and the key it meant", async () => {
    const file = path.join(scratch, "typo.yaml");
    writeFileSync(file, `redis:\n  ulr: ${REDIS_URL}\ndatabase:\n  url: ${migrated.url}\n`);
    const r = await sy(["router", "--config", file]);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/redis\.ulr: unknown key \(in .*typo\.yaml\); did you mean redis\.url\?/);
  });

  it("a misspelt SWITCHYARD_* variable stops it the same way, naming the variable", async () => {
    const r = await sy(["router"], { SWITCHYARD_REDIS__ULR: REDIS_URL, DATABASE_URL: migrated.url });
    expect(r.code).toBe(2);
    expect(r.stderr).toContain("redis.ulr: unknown key (from SWITCHYARD_REDIS__ULR); did you mean SWITCHYARD_REDIS__URL?");
  });

  it("without redis.url or database.url it names what is missing and points at `up`", async () => {
    const none = await sy(["router"]);
    expect(none.code).toBe(2);
    expect(none.stderr).toContain("redis.url is not set");
    expect(none.stderr).toContain("database.url is not set");
    expect(none.stderr).toContain("switchyard up");
    const noDb = await sy(["router"], { REDIS_URL });
    expect(noDb.code).toBe(2);
    expect(noDb.stderr).not.toContain("redis.url is not set");
    expect(noDb.stderr).toContain("database.url is not set");
  });

  it("a database behind migrations/ is refused with what to run; after `migrate` the router starts", async () => {
    const env = { REDIS_URL, DATABASE_URL: bareUrl, SWITCHYARD_PORT: "0", SWITCHYARD_ROUTER__ADMIN_PORT: "0", SWITCHYARD_REDIS__KEY_PREFIX: `${uniqueName("k")}:` };
    const refused = await sy(["router"], env);
    expect(refused.code).toBe(2);
    expect(refused.stderr).toMatch(/database 127\.0\.0\.1:5432 is not migrated: 0 of \d+ migrations applied \(pending: 0000_init, .*\); run 'switchyard migrate'/);
    expect((await sy(["migrate"], env)).code).toBe(0);

    // Migrated: it starts, says once what it runs on, and /readyz says the same.
    const child = spawn(process.execPath, [bin, "router"], { env: { ...process.env, ...clean, ...env }, stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    child.stdout.on("data", (d: Buffer) => (out += d.toString()));
    child.stderr.on("data", (d: Buffer) => (out += d.toString()));
    try {
      await waitFor(() => /router listening/.test(out), { timeoutMs: 30_000, what: () => `router start:\n${out.slice(-2000)}` });
      const line = JSON.parse(out.split("\n").find((l) => l.includes("router listening"))!) as Record<string, unknown>;
      expect(line).toMatchObject({ registry: "redis", budgets: "redis", ledger: "redis-stream", redis: "127.0.0.1:6379", database: { kind: "external", host: "127.0.0.1:5432", name: bareName } });
      expect(line.chain).toEqual(["local", "remote", "openrouter", "anthropic"]);
      expect(JSON.stringify(line)).not.toContain("postgres@"); // no credentials, even a user name
      const ready = (await (await fetch(`${line.url as string}/readyz`)).json()) as { status: string; state: Record<string, unknown> };
      expect(ready.status).toBe("ready");
      // The public endpoint says which kinds of state, not where they live.
      expect(ready.state).toEqual({ registry: "redis", budgets: "redis", ledger: "redis-stream", database: { kind: "external" }, chain: line.chain, providers: [] });
      const admin = (await (await fetch(`${line.admin as string}/readyz`)).json()) as { state: Record<string, unknown> };
      expect(admin.state).toMatchObject({ redis: "127.0.0.1:6379", database: { host: "127.0.0.1:5432", name: bareName } });
    } finally {
      const exited = new Promise((r) => child.once("exit", r));
      child.kill("SIGTERM");
      await exited;
    }
  });
});

describe("embedded state", () => {
  it("admin commands without database.url never create an embedded database (a migration job missing DATABASE_URL fails)", async () => {
    const home = path.join(scratch, "never-up");
    for (const args of [["migrate"], ["tenants", "list"], ["keys", "list", "--tenant", "x"]]) {
      const r = await sy(args, { SWITCHYARD_HOME: home });
      expect(r.code, args.join(" ")).toBe(2);
      expect(r.stderr).toContain("database.url is not set (DATABASE_URL) and there is no embedded database under");
      expect(r.stderr).toContain("switchyard up");
    }
    expect(existsSync(path.join(home, "pg"))).toBe(false);
  });

  it("up under a directory the postgres user cannot enter says which one and how to fix it", async () => {
    // As root, embedded PostgreSQL runs as `postgres`: a private parent (mktemp -d is 0700) stops initdb.
    expect(process.getuid?.()).toBe(0); // CI and this machine run tests as root; the check only exists there
    const parent = mkdtempSync(path.join(tmpdir(), "sy-private-"));
    chmodSync(parent, 0o700);
    try {
      const r = await sy(["up", "--no-worker"], { SWITCHYARD_HOME: path.join(parent, "home"), SWITCHYARD_PORT: "0", SWITCHYARD_ROUTER__ADMIN_PORT: "0" });
      expect(r.code).toBe(1);
      expect(r.stderr).toContain(`cannot enter ${parent} (mode 700`);
      expect(r.stderr).toContain(`chmod o+x ${parent}`);
    } finally {
      rmSync(parent, { recursive: true, force: true });
    }
  });

  it("finance reaches the embedded database of a running `up`: db url, the saved URL file, psql", async () => {
    const home = path.join(scratch, "up-home");
    mkdirSync(home, { recursive: true });
    const env = { SWITCHYARD_HOME: home, SWITCHYARD_PORT: "0", SWITCHYARD_ROUTER__ADMIN_PORT: "0" };
    expect((await sy(["db", "url"], env)).stderr).toMatch(/embedded PostgreSQL .* is not running.*switchyard up/);
    const up = spawn(process.execPath, [bin, "up", "--no-worker"], { env: { ...process.env, ...clean, ...env }, stdio: ["ignore", "ignore", "pipe"] });
    let err = "";
    up.stderr.on("data", (d: Buffer) => (err += d.toString()));
    try {
      await waitFor(() => /Try: curl/.test(err) || up.exitCode !== null, { timeoutMs: 90_000, what: () => `up to start:\n${err.slice(-2000)}` });
      expect(up.exitCode, err).toBeNull();
      const printed = /database migrated: (postgres:\/\/\S+)/.exec(err)?.[1];
      expect(printed).toMatch(/^postgres:\/\/postgres:[^@]+@127\.0\.0\.1:\d+\/postgres$/);
      const file = path.join(home, "database-url");
      expect(statSync(file).mode & 0o777).toBe(0o600);
      const url = await sy(["db", "url"], env);
      expect(url.code).toBe(0);
      expect(url.stdout.trim()).toBe(printed);
      // Admin commands use the embedded database `up` made, and say so.
      const tenants = await sy(["tenants", "list"], env);
      expect(tenants.code).toBe(0);
      expect(tenants.stderr).toContain("using the embedded PostgreSQL of 'switchyard up'");
      expect(tenants.stdout).toMatch(/local/);
      const psql = await sy(["psql", "-At", "-c", "select name from tenants order by id"], env);
      expect(psql.code).toBe(0);
      expect(psql.stdout.trim()).toBe("local");
      // Finance's own psql with the printed URL works too (no "no password supplied").
      const direct = await run("psql", [printed!, "-At", "-c", "select count(*) from spend_ledger"]);
      expect(direct.stdout.trim()).toBe("0");
    } finally {
      const exited = new Promise((r) => up.once("exit", r));
      up.kill("SIGTERM");
      await exited;
    }
  }, 120_000);
});
