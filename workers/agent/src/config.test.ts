// The agent's config schema: defaults filled in once, the environment read
// only here, and every bad field refused by name.
import { describe, expect, it } from "vitest";
import { parseWorkerConfig, WorkerConfigError } from "./config.ts";

const base = { models: ["smollm2-135m-instruct"], token: "secret" };

function issues(input: Record<string, unknown>): string[] {
  try {
    parseWorkerConfig(input as never, {});
  } catch (err) {
    if (err instanceof WorkerConfigError) return err.issues.map((i) => i.path);
    throw err;
  }
  return [];
}

describe("worker config", () => {
  it("fills in the defaults a worker runs with", () => {
    const c = parseWorkerConfig(base, { SWITCHYARD_CACHE: "/srv/cache" });
    expect(c).toMatchObject({ host: "127.0.0.1", port: 0, device: "auto", maxBatch: 16, maxSeqLen: 2048, heartbeatMs: 1000, ttlMs: 3000, drainGraceMs: 30_000, shardF16: false, shardKeepaliveMs: 5000, cacheDir: "/srv/cache" });
    expect(c.layers).toBeUndefined();
  });

  it("keeps what the options say over the environment", () => {
    expect(parseWorkerConfig({ ...base, cacheDir: "/mine" }, { SWITCHYARD_CACHE: "/env" }).cacheDir).toBe("/mine");
    expect(parseWorkerConfig(base, {}).cacheDir).toMatch(/\.cache\/switchyard$/);
  });

  it("refuses each bad field by name", () => {
    expect(issues({ ...base, models: [] })).toEqual(["models"]);
    expect(issues({ ...base, token: "" })).toEqual(["token"]);
    expect(issues({ ...base, port: 70_000 })).toEqual(["port"]);
    expect(issues({ ...base, maxBatch: Number("x") })).toEqual(["maxBatch"]);
    expect(issues({ ...base, device: "tpu" })).toEqual(["device"]);
    expect(issues({ ...base, layers: { start: 15, end: 15 } })).toEqual(["layers"]);
    expect(issues({ ...base, heartbeatMs: 1000, ttlMs: 1000 })).toEqual(["ttlMs"]);
    expect(issues({ ...base, next: { url: "http://10.0.0.2:9100", token: "t" } })).toEqual(["next"]);
    expect(issues({ ...base, next: { url: "not a url", token: "t" }, layers: { start: 0, end: 15 } })).toEqual(["next.url"]);
    expect(issues({ ...base, shardKeepaliveMs: 50 })).toEqual(["shardKeepaliveMs"]);
    expect(issues({ ...base, shardKeepaliveMs: 0 })).toEqual([]);
  });

  it("refuses an option it does not know (a typo is an error, not a default)", () => {
    expect(issues({ ...base, maxBatchh: 8 })).toEqual([""]);
    expect(() => parseWorkerConfig({ ...base, maxBatchh: 8 } as never, {})).toThrow(/maxBatchh/);
  });

  it("accepts a shard with its next hop", () => {
    const c = parseWorkerConfig({ ...base, layers: { start: 0, end: 15 }, next: { url: "http://10.0.0.2:9100", token: "t" }, pipelineDepth: 4 }, {});
    expect(c).toMatchObject({ layers: { start: 0, end: 15 }, next: { url: "http://10.0.0.2:9100" }, pipelineDepth: 4 });
  });
});
