// The worker's lease fencing: the highest token seen wins, older tokens are
// refused with 409 in the OpenAI error shape, requests without a token pass,
// and only authenticated requests can move the highest token.
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { describe, expect, it } from "vitest";
import type { EngineSupervisor } from "../engine/supervisor.ts";
import { createWorkerApp } from "./app.ts";
import type { WorkerContext } from "./context.ts";
import { encodeShardRoute, FENCING_WORKER_HEADER, fencingPublicKey, FencingSigner, SHARD_ROUTE_HEADER, signShardRoute } from "@switchyard/state";
import type { PipelineHead } from "../shard/pipeline.ts";
import { FENCING_SIGNATURE_HEADER, FencingGuard } from "./fencing.ts";

describe("FencingGuard", () => {
  it("accepts equal or newer tokens, refuses older ones, ignores requests without one", () => {
    const g = new FencingGuard();
    expect(g.admit(undefined)).toEqual({ ok: true });
    expect(g.admit("5")).toEqual({ ok: true, token: 5 });
    expect(g.admit("5")).toEqual({ ok: true, token: 5 });
    expect(g.admit("4")).toMatchObject({ ok: false, status: 409, code: "stale_fencing_token" });
    expect(g.admit("9007199254740991")).toMatchObject({ ok: true });
    expect(g.admit("6")).toMatchObject({ ok: false, code: "stale_fencing_token" });
    expect(g.admit(undefined)).toEqual({ ok: true });
    for (const bad of ["", "0", "-1", "1.5", "abc", "01", "12345678901234567", "9999999999999999"]) expect(g.admit(bad)).toMatchObject({ ok: false, status: 400, code: "invalid_fencing_token" });
    expect(g).toMatchObject({ highest: 9007199254740991, accepted: 3, refused: 2 });
  });

  it("with a state file, the highest token survives a restart of the worker", () => {
    const file = path.join(mkdtempSync(path.join(os.tmpdir(), "sy-fence-")), "workers", "w1.fence");
    const before = new FencingGuard(file);
    expect(before.admit("7")).toEqual({ ok: true, token: 7 });
    expect(readFileSync(file, "utf8").trim()).toBe("7");
    // A new process for the same worker: the superseded holder (6) is still refused.
    const after = new FencingGuard(file);
    expect(after.highest).toBe(7);
    const stale = after.admit("6");
    expect(stale).toMatchObject({ ok: false, status: 409, code: "stale_fencing_token" });
    expect(!stale.ok && stale.message).toContain(file);
    expect(after.admit("7")).toEqual({ ok: true, token: 7 });
    expect(after.admit("8")).toEqual({ ok: true, token: 8 });
    expect(new FencingGuard(file).highest).toBe(8);
    // A damaged file stops the worker rather than forget the fence.
    writeFileSync(file, "garbage");
    expect(() => new FencingGuard(file)).toThrow(/unreadable/);
  });
});

describe("worker HTTP API fencing", () => {
  const TOKEN = "worker-secret-123";
  // A ready engine with no models loaded: a request that gets past fencing answers 404 model_not_found.
  const supervisor = { state: "ready", client: { alive: true }, loaded: new Map() } as unknown as EngineSupervisor;
  const ctx: WorkerContext = {
    supervisor,
    token: TOKEN,
    inFlight: 0,
    begin: () => () => {},
    arrive: () => () => {},
    draining: false,
    idle: async () => {},
    log: () => {},
    notePrefix: () => {},
    fencing: new FencingGuard(),
  };
  const app = createWorkerApp(ctx);
  const post = (fence?: string, auth = `Bearer ${TOKEN}`) =>
    app.request("/v1/embeddings", {
      method: "POST",
      headers: { authorization: auth, "content-type": "application/json", ...(fence !== undefined ? { "x-switchyard-fencing-token": fence } : {}) },
      body: JSON.stringify({ model: "m", input: "x" }),
    });
  const code = async (r: Response) => ((await r.json()) as { error: { code: string; type: string } }).error;

  it("refuses a dispatch with an older token (409, OpenAI shape); newer, equal and token-less dispatches pass", async () => {
    expect((await post("10")).status).toBe(404);
    expect((await post("10")).status).toBe(404);
    const stale = await post("9");
    expect(stale.status).toBe(409);
    expect(await code(stale)).toMatchObject({ code: "stale_fencing_token", type: "invalid_request_error" });
    expect((await post()).status).toBe(404);
    expect((await post("11")).status).toBe(404);
    expect((await post("10")).status).toBe(409);
    const bad = await post("ten");
    expect(bad.status).toBe(400);
    expect((await code(bad)).code).toBe("invalid_fencing_token");
  });

  it("an unauthenticated request cannot move the highest token", async () => {
    const r = await post("999999", "Bearer wrong");
    expect(r.status).toBe(401);
    expect((await post("12")).status).toBe(404);
  });
});

describe("signed fencing tokens (invited workers)", () => {
  const SECRET = "routers-secret-key-0123456789";
  const publicKey = fencingPublicKey(SECRET);
  const signer = new FencingSigner(SECRET);

  it("counts a token only with a router's signature for this worker's id", () => {
    const g = new FencingGuard(undefined, { workerId: "w1", publicKey });
    expect(g.admit(undefined)).toEqual({ ok: true });
    expect(g.admit("5", signer.sign("w1", 5))).toEqual({ ok: true, token: 5 });
    expect(g.admit("5", signer.sign("w1", 5))).toEqual({ ok: true, token: 5 });
    for (const sig of [undefined, "", "x", signer.sign("w2", 9007199254740991), signer.sign("w1", 6)]) {
      expect(g.admit("9007199254740991", sig)).toMatchObject({ ok: false, status: 403, code: "unsigned_fencing_token" });
    }
    expect(g.highest).toBe(5);
    expect(g.admit("6", signer.sign("w1", 6))).toEqual({ ok: true, token: 6 });
    // A signed but older token is still stale.
    expect(g.admit("5", signer.sign("w1", 5))).toMatchObject({ ok: false, status: 409 });
    // A signature from another secret key does not verify.
    expect(g.admit("7", new FencingSigner("some-other-secret-key-000").sign("w1", 7))).toMatchObject({ ok: false, status: 403 });
  });

  it("refuses a malformed fencing key at start", () => {
    expect(() => new FencingGuard(undefined, { workerId: "w1", publicKey: "not-a-key" })).toThrow(/32 bytes/);
  });

  it("over HTTP: an authenticated caller without the router's signature cannot move the highest token", async () => {
    const TOKEN = "worker-secret-456";
    const supervisor = { state: "ready", client: { alive: true }, loaded: new Map() } as unknown as EngineSupervisor;
    const app = createWorkerApp({ supervisor, token: TOKEN, inFlight: 0, begin: () => () => {}, arrive: () => () => {}, draining: false, idle: async () => {}, log: () => {}, notePrefix: () => {}, fencing: new FencingGuard(undefined, { workerId: "w9", publicKey }) });
    const post = (fence: string, sig?: string) =>
      app.request("/v1/embeddings", {
        method: "POST",
        headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json", "x-switchyard-fencing-token": fence, ...(sig ? { [FENCING_SIGNATURE_HEADER]: sig } : {}) },
        body: JSON.stringify({ model: "m", input: "x" }),
      });
    const forged = await post("9007199254740991");
    expect(forged.status).toBe(403);
    expect(((await forged.json()) as { error: { code: string } }).error.code).toBe("unsigned_fencing_token");
    expect((await post("3", signer.sign("w9", 3))).status).toBe(404); // past fencing: no model loaded
  });
});

describe("a head shard and the leases on the shards after it", () => {
  const SECRET = "routers-secret-key-0123456789";
  const publicKey = fencingPublicKey(SECRET);
  const signer = new FencingSigner(SECRET);

  it("over HTTP: a shard's lease must name a shard on the request's route and carry a well-formed token; the head leaves checking it to that shard, and its own highest token stays its own", async () => {
    const TOKEN = "worker-secret-789";
    const supervisor = { state: "ready", client: { alive: true }, loaded: new Map() } as unknown as EngineSupervisor;
    const fencing = new FencingGuard(undefined, { workerId: "head", publicKey });
    const base = { supervisor, token: TOKEN, inFlight: 0, begin: () => () => {}, arrive: () => () => {}, draining: false, idle: async () => {}, log: () => {}, notePrefix: () => {}, fencing };
    const head = createWorkerApp({ ...base, shardHead: { pipeline: {} as PipelineHead, shard: () => undefined, digest: "d".repeat(64) } });
    const route = encodeShardRoute(signShardRoute({ model: "m", digest: "d".repeat(64), stages: [{ start: 15, end: 30, hops: [{ id: "t1", url: "http://10.0.0.2:9100" }, { id: "t2", url: "http://10.0.0.3:9100" }] }] }, () => "cred", Date.now() + 60_000)!);
    const post = (app: ReturnType<typeof createWorkerApp>, fence: string, sig: string, worker?: string) =>
      app.request("/v1/embeddings", {
        method: "POST",
        headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json", "x-switchyard-fencing-token": fence, [FENCING_SIGNATURE_HEADER]: sig, [SHARD_ROUTE_HEADER]: route, ...(worker ? { [FENCING_WORKER_HEADER]: worker } : {}) },
        body: JSON.stringify({ model: "m", input: "x" }),
      });
    // Past fencing: 404 (no model loaded). t1's tokens are t1's to judge (shard/server.ts): the head passes an older one on.
    expect((await post(head, "8", signer.sign("t1", 8), "t1")).status).toBe(404);
    expect((await post(head, "7", signer.sign("t1", 7), "t1")).status).toBe(404);
    expect((await post(head, "4", signer.sign("head", 4))).status).toBe(404);
    expect(fencing.highest).toBe(4);
    expect((await post(head, "3", signer.sign("head", 3))).status).toBe(409);
    const bad = await post(head, "seven", "", "t1");
    expect(bad.status).toBe(400);
    expect(((await bad.json()) as { error: { code: string } }).error.code).toBe("invalid_fencing_token");
    // A shard not on the route, or a worker that is no head: refused.
    const off = await post(head, "9", signer.sign("t3", 9), "t3");
    expect(off.status).toBe(400);
    expect(((await off.json()) as { error: { code: string } }).error.code).toBe("invalid_fencing_token");
    expect((await post(createWorkerApp(base), "9", signer.sign("t1", 9), "t1")).status).toBe(400);
  });
});
