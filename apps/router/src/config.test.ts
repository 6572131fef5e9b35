import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { ConfigError, loadConfig } from "./config.ts";

describe("config", () => {
  it("has working defaults", () => {
    const c = loadConfig({ env: {} });
    expect(c.router.port).toBe(8080);
    expect(c.router.bodyLimitBytes).toBe(4 * 1024 * 1024);
    expect(c.deadlines.firstTokenMs).toBe(30_000);
    expect(c.redis.url).toBeUndefined();
  });

  it("reads YAML, then lets SWITCHYARD_* env override it", () => {
    const dir = mkdtempSync(path.join(tmpdir(), "sycfg-"));
    const file = path.join(dir, "s.yaml");
    writeFileSync(file, "router:\n  port: 9000\n  maxAttempts: 2\ndeadlines:\n  idleMs: 1234\n");
    const c = loadConfig({ file, env: { SWITCHYARD_ROUTER__PORT: "9100", SWITCHYARD_DEADLINES__FIRST_TOKEN_MS: "500", REDIS_URL: "redis://x:1" } });
    expect(c.router.port).toBe(9100);
    expect(c.router.maxAttempts).toBe(2);
    expect(c.deadlines.idleMs).toBe(1234);
    expect(c.deadlines.firstTokenMs).toBe(500);
    expect(c.redis.url).toBe("redis://x:1");
  });

  it("an invalid value stops with a message naming the key", () => {
    expect(() => loadConfig({ env: { SWITCHYARD_ROUTER__PORT: "not-a-port" } })).toThrow(ConfigError);
    expect(() => loadConfig({ env: { SWITCHYARD_ROUTER__PORT: "99999" } })).toThrow(/router\.port/);
    expect(() => loadConfig({ env: { SWITCHYARD_DEADLINES__IDLE_MS: "-5" } })).toThrow(/deadlines\.idleMs/);
  });

  it("redis.keyPrefix may not hold braces: they would replace the keys' own Cluster hash tags", () => {
    expect(() => loadConfig({ env: { SWITCHYARD_REDIS__KEY_PREFIX: "sy:{prod}:" } })).toThrow(/redis\.keyPrefix.*hash tags/);
    expect(loadConfig({ env: { SWITCHYARD_REDIS__KEY_PREFIX: "prod:sy:" } }).redis.keyPrefix).toBe("prod:sy:");
  });

  it("router.processes: a whole number from 1, unset by default (one per core), a misspelling named", () => {
    expect(loadConfig({ env: {} }).router.processes).toBeUndefined();
    expect(loadConfig({ env: { SWITCHYARD_ROUTER__PROCESSES: "4" } }).router.processes).toBe(4);
    expect(() => loadConfig({ env: { SWITCHYARD_ROUTER__PROCESSES: "0" } })).toThrow(/router\.processes/);
    expect(() => loadConfig({ env: { SWITCHYARD_ROUTER__PROCESSES: "two" } })).toThrow(/router\.processes/);
    expect(() => loadConfig({ env: { SWITCHYARD_ROUTER__PROCESSSES: "2" } })).toThrow(/did you mean SWITCHYARD_ROUTER__PROCESSES\?/);
  });

  it("leases.fenceIdleS: a week by default, refused below twice the longest lease and wait", () => {
    expect(loadConfig({ env: {} }).leases.fenceIdleS).toBe(7 * 86_400);
    expect(loadConfig({ env: { SWITCHYARD_LEASES__FENCE_IDLE_S: "7800" } }).leases.fenceIdleS).toBe(7_800);
    expect(() => loadConfig({ env: { SWITCHYARD_LEASES__FENCE_IDLE_S: "7799" } })).toThrow(/leases\.fenceIdleS.*7800/);
    expect(loadConfig({ env: { SWITCHYARD_LEASES__FENCE_IDLE_S: "4", SWITCHYARD_LEASES__MAX_DURATION_S: "2", SWITCHYARD_LEASES__MAX_WAIT_S: "0" } }).leases.fenceIdleS).toBe(4);
  });

  it("a missing or broken file is a clear error", () => {
    expect(() => loadConfig({ file: "/nonexistent.yaml", env: {} })).toThrow(/does not exist/);
    const dir = mkdtempSync(path.join(tmpdir(), "sycfg-"));
    const file = path.join(dir, "bad.yaml");
    writeFileSync(file, "router: [unclosed");
    expect(() => loadConfig({ file, env: {} })).toThrow(/not valid YAML/);
  });

  it("an unknown key in the file stops with its path and the key it probably meant", () => {
    const dir = mkdtempSync(path.join(tmpdir(), "sycfg-"));
    const file = path.join(dir, "typo.yaml");
    writeFileSync(file, "redis:\n  ulr: redis://127.0.0.1:6379\nrouter:\n  bodyLimitByte: 10\nrouting:\n  models:\n    fast:\n      workr: smollm2\n");
    let message = "";
    try {
      loadConfig({ file, env: {} });
    } catch (err) {
      expect(err).toBeInstanceOf(ConfigError);
      message = (err as Error).message;
    }
    expect(message).toMatch(/redis\.ulr: unknown key .*did you mean redis\.url\?/);
    expect(message).toMatch(/router\.bodyLimitByte: unknown key .*did you mean router\.bodyLimitBytes\?/);
    // Record values (an alias's backends) are checked too.
    expect(message).toMatch(/routing\.models\.fast\.workr: unknown key .*did you mean routing\.models\.fast\.worker\?/);
  });

  it("an invalid value names where it came from: the variable, or the file", () => {
    expect(() => loadConfig({ env: { SWITCHYARD_ROUTER__PORT: "abc" } })).toThrow(/router\.port: .*\(from SWITCHYARD_ROUTER__PORT\)$/);
    expect(() => loadConfig({ env: { SWITCHYARD_ROUTING__CHAIN: '["local", 7]' } })).toThrow(/routing\.chain\.1: .*\(from SWITCHYARD_ROUTING__CHAIN\)$/);
    const dir = mkdtempSync(path.join(tmpdir(), "sycfg-"));
    const file = path.join(dir, "value.yaml");
    writeFileSync(file, "router:\n  port: lots\n");
    expect(() => loadConfig({ file, env: {} })).toThrow(new RegExp(`router\\.port: .*\\(in ${file.replace(/[.*+?^${}()|[\]\\/]/g, "\\$&")}\\)$`));
    // An override (tests, the CLI's own flags) has no place to name.
    expect(() => loadConfig({ env: { SWITCHYARD_ROUTER__PORT: "1" }, overrides: { "router.port": "x" } })).toThrow(/router\.port: [^(]*$/);
  });

  it("an unknown key from the environment names the variable and the one it probably meant", () => {
    expect(() => loadConfig({ env: { SWITCHYARD_REDIS__ULR: "redis://x:1" } })).toThrow(/redis\.ulr: unknown key \(from SWITCHYARD_REDIS__ULR\); did you mean SWITCHYARD_REDIS__URL\?/);
    expect(() => loadConfig({ env: { SWITCHYARD_ROUTER__BODY_LIMIT_BYTE: "5" } })).toThrow(/did you mean SWITCHYARD_ROUTER__BODY_LIMIT_BYTES\?/);
    // Far from every known key: no guess, still an error.
    expect(() => loadConfig({ env: { SWITCHYARD_ZEBRA__STRIPES: "1" } })).toThrow(/^invalid configuration:\n {2}zebra: unknown key \(from SWITCHYARD_ZEBRA__STRIPES\)$/);
    expect(() => loadConfig({ env: { SWITCHYARD___PROTO____POLLUTED: "1" } })).toThrow(ConfigError);
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
  });

  it("lists and maps come from the environment as JSON", () => {
    const c = loadConfig({ env: { SWITCHYARD_ROUTING__CHAIN: '["remote","openrouter"]', SWITCHYARD_WORKERS__ALLOWED_NETWORKS: '["10.0.0.0/8"]' } });
    expect(c.routing.chain).toEqual(["remote", "openrouter"]);
    expect(c.workers.allowedNetworks).toEqual(["10.0.0.0/8"]);
    expect(() => loadConfig({ env: { SWITCHYARD_ROUTING__CHAIN: '["remote",' } })).toThrow(/starts like JSON but does not parse/);
  });
});
