// Split models placed by the router (issue 11, items 4, 5 and 6): real
// router (Redis registry, Postgres), a head shard (blocks 0-15) and two
// replicas of the tail (15-30) as their own `switchyard worker` processes.
// The router assembles the pipeline from heartbeats, lists the model only
// while a complete one exists, explains the chain, and tells the head the
// route per request. A tail killed mid-stream (SIGKILL) is replaced by the
// other one: the stream goes on with exactly the unsplit model's greedy text,
// no error event. With no replica left: one SSE error event, and the model
// leaves /v1/models within the heartbeat TTL. Model files that differ are
// never chained, and a shard refuses a route for another file. A lease on
// a tail is fenced by that tail itself: a superseded holder is refused even
// through a head that never saw the newer lease.
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createKey, createTenant } from "@switchyard/db";
import { startAgent, type AgentHandle } from "@switchyard/agent";
import { encodeShardRoute, FENCING_WORKER_HEADER, legOf, MemoryRegistryStore, SHARD_ROUTE_HEADER, signShardRoute, type WorkerRecord } from "@switchyard/state";
import { ShardLink } from "../../workers/agent/src/shard/link.ts";
import type { PipelineHead } from "../../workers/agent/src/shard/pipeline.ts";
import { REDIS_URL, waitFor } from "../helpers/env.ts";
import { startTestRouter, type RouterFixture } from "../helpers/router.ts";
import { engineBinary, WORKER_TOKEN } from "../helpers/worker.ts";

const LLM = "smollm2-135m-instruct";
const CLI = path.resolve(import.meta.dirname, "../../apps/cli/bin/switchyard.mjs");
const TTL_MS = 3000;
let fx: RouterFixture;
let whole: AgentHandle;
let head: AgentHandle;
const tails = new Map<string, { child: ChildProcess; stderr: () => string; exited: Promise<unknown> }>();
// The tails' fencing state (the highest lease token each has seen), this run's own.
const fenceDir = mkdtempSync(path.join(os.tmpdir(), "sy-split-fence-"));

function spawnTail(id: string, layers = "15-30"): void {
  const child = spawn(
    process.execPath,
    [CLI, "worker", "--redis", REDIS_URL, "--key-prefix", fx.redis.prefix, "--token", WORKER_TOKEN, "--model", LLM, "--engine", engineBinary(), "--device", "cpu", "--port", "0", "--host", "127.0.0.1", "--id", id, "--layers", layers, "--max-batch", "4", "--fencing-state", path.join(fenceDir, `${id}.fence`)],
    { stdio: ["ignore", "ignore", "pipe"] },
  );
  let stderr = "";
  child.stderr!.on("data", (d: Buffer) => (stderr = (stderr + d.toString()).slice(-20_000)));
  tails.set(id, { child, stderr: () => stderr, exited: new Promise((r) => child.once("exit", r)) });
}

const agentOpts = { models: [LLM], token: WORKER_TOKEN, device: "cpu" as const, engineBinary: engineBinary(), maxBatch: 4, maxSeqLen: 512, drainGraceMs: 0, threads: 1, log: () => {} };

beforeAll(async () => {
  fx = await startTestRouter({ "workers.token": WORKER_TOKEN, "routing.scorer.epsilon": 0, "leases.pollMs": 50, "leases.queueWaitMs": 100 });
  // The reference: the unsplit model, where the router cannot see it.
  [whole, head] = await Promise.all([
    startAgent({ ...agentOpts, registry: new MemoryRegistryStore(), workerId: "whole" }),
    startAgent({ ...agentOpts, registry: fx.registry, workerId: "head", layers: { start: 0, end: 15 } }),
  ]);
  await Promise.all([whole.supervisor.whenReady(), head.supervisor.whenReady()]);
}, 120_000);

afterAll(async () => {
  for (const t of tails.values()) t.child.kill("SIGKILL");
  await Promise.all([whole?.stop(), head?.stop()]);
  await fx?.close();
});

const auth = () => ({ authorization: `Bearer ${fx.key}`, "content-type": "application/json" });
const listed = async () => ((await (await fetch(`${fx.router.url}/v1/models`, { headers: auth() })).json()) as { data: { id: string }[] }).data.map((m) => m.id);
const story = [{ role: "user", content: "Tell me a long story about a lighthouse keeper and a storm." }];

async function reference(maxTokens: number): Promise<string> {
  const res = await fetch(`${whole.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${WORKER_TOKEN}`, "content-type": "application/json" },
    body: JSON.stringify({ model: LLM, messages: story, temperature: 0, max_tokens: maxTokens }),
  });
  return ((await res.json()) as { choices: { message: { content: string } }[] }).choices[0]!.message.content;
}

/** A streamed chat through the router; `onFirst` runs once the first text arrived (with the route header). */
async function streamChat(maxTokens: number, onFirst: (route: string) => void | Promise<void>): Promise<{ text: string; events: string[]; gapMs: number }> {
  const res = await fetch(`${fx.router.url}/v1/chat/completions`, {
    method: "POST",
    headers: { ...auth(), "x-switchyard-debug": "route" },
    body: JSON.stringify({ model: LLM, messages: story, temperature: 0, max_tokens: maxTokens, stream: true }),
  });
  expect(res.status).toBe(200);
  const route = res.headers.get("x-switchyard-route") ?? "";
  const reader = res.body!.getReader();
  const dec = new TextDecoder();
  let raw = "";
  let fired = false;
  // onFirst (a kill) → the next text the client gets: how long the stream stalled.
  let firedAt = 0;
  let gapMs = -1;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    const chunk = dec.decode(value, { stream: true });
    raw += chunk;
    if (fired && gapMs < 0 && chunk.includes('"content":"')) gapMs = performance.now() - firedAt;
    if (!fired && raw.includes('"content":"')) {
      fired = true;
      await onFirst(route);
      firedAt = performance.now();
    }
  }
  const events = raw
    .split("\n\n")
    .filter((e) => e.startsWith("data: "))
    .map((e) => e.slice(6));
  let text = "";
  for (const e of events) {
    if (e === "[DONE]" || e.startsWith('{"error"')) continue;
    text += (JSON.parse(e) as { choices: { delta?: { content?: string } }[] }).choices[0]?.delta?.content ?? "";
  }
  if (process.env.SY_TEST_LOG) console.info(`stream: kill → next text ${gapMs.toFixed(0)} ms`);
  return { text, events, gapMs };
}

/** The replicas of the tail stage, in the order the chosen chain names them. */
const tailOrder = (route: string) => /pipeline\[head 0-15 > ([^ ]+) 15-30\]/.exec(route)?.[1]?.split("|") ?? [];

describe("split models placed by the router from heartbeats", () => {
  it("lists the model only once a complete pipeline of warmed-up shards exists, then serves it exactly like the unsplit model", async () => {
    // The head alone: blocks 0-15 cover nothing on their own.
    await waitFor(() => fx.router.deps.directory.all().some((w) => w.id === "head" && w.state === "ready"), { timeoutMs: 5000, what: "head in the registry" });
    expect(await listed()).not.toContain(LLM);
    const none = await fetch(`${fx.router.url}/v1/chat/completions`, { method: "POST", headers: auth(), body: JSON.stringify({ model: LLM, messages: story, max_tokens: 4 }) });
    expect(none.status).toBe(404);

    spawnTail("tail-a");
    spawnTail("tail-b");
    await waitFor(() => fx.router.deps.directory.pipelines(LLM)[0]?.stages[0]?.replicas.length === 2, {
      timeoutMs: 90_000,
      what: () => `both tails in a pipeline (${[...tails.values()].map((t) => t.stderr().slice(-400)).join("\n")})`,
    });
    // Routable only once warm: each tail reported its start → ready.
    for (const w of fx.router.deps.directory.all().filter((x) => x.id.startsWith("tail-"))) {
      expect(w.state).toBe("ready");
      expect(w.readyMs).toBeGreaterThan(0);
    }
    expect(await listed()).toContain(LLM);

    const want = await reference(24);
    const res = await fetch(`${fx.router.url}/v1/chat/completions`, {
      method: "POST",
      headers: { ...auth(), "x-switchyard-debug": "route" },
      body: JSON.stringify({ model: LLM, messages: story, temperature: 0, max_tokens: 24 }),
    });
    expect(res.status).toBe(200);
    // The chosen chain, explained: head, then the tail's replicas in preference order.
    expect(res.headers.get("x-switchyard-route")).toMatch(/^pipeline\[head 0-15 > (tail-a\|tail-b|tail-b\|tail-a) 15-30\] score=/);
    const body = (await res.json()) as { choices: { message: { content: string } }[]; usage: { completion_tokens: number } };
    expect(body.choices[0]!.message.content).toBe(want);
  }, 180_000);

  it("refuses a route for another model file at the head and at the shard handshake, and a ticket that is not the shard's", async () => {
    const tail = fx.router.deps.directory.all().find((w) => w.id === "tail-a")!;
    const plan = (digest: string) => ({ model: LLM, digest, stages: [{ start: 15, end: 30, hops: [{ id: tail.id, url: tail.url }] }] });
    const good = head.ctx.shardHead!.digest;
    const other = "c".repeat(64);
    // The head: a route whose model file differs from its own is refused, not run.
    const wrong = signShardRoute(plan(other), () => WORKER_TOKEN, Date.now() + 60_000)!;
    const res = await fetch(`${head.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${WORKER_TOKEN}`, "content-type": "application/json", [SHARD_ROUTE_HEADER]: encodeShardRoute(wrong) },
      body: JSON.stringify({ model: LLM, messages: story, max_tokens: 4 }),
    });
    expect(res.status).toBe(409);
    expect(((await res.json()) as { error: { message: string } }).error.message).toMatch(/model file differs/);
    // The shard: a routed connection for another file, or with a ticket under another credential, is refused.
    const expectOf = { model: LLM, digest: good, layerStart: 15 };
    const connect = (route: ReturnType<typeof signShardRoute>) => ShardLink.connect({ url: tail.url, id: tail.id, routed: { ticket: route!.stages[0]!.hops[0]!.ticket, leg: legOf(route!, 0), path: [] } }, expectOf);
    await expect(connect(wrong)).rejects.toThrow(/409 model file differs/);
    await expect(connect(signShardRoute(plan(good), () => "another-credential-0123", Date.now() + 60_000))).rejects.toThrow(/401 the shard ticket is not this worker's/);
    await expect(connect(signShardRoute(plan(good), () => WORKER_TOKEN, Date.now() - 1))).rejects.toThrow(/expired/);
    const ok = await connect(signShardRoute(plan(good), () => WORKER_TOKEN, Date.now() + 60_000));
    ok.close();
    // The router never chains a shard advertising another model file: a third
    // tail record with another digest joins no pipeline.
    const fake: WorkerRecord = { ...tail, id: "tail-fake", layerRanges: [{ model: LLM, start: 15, end: 30, blocks: 30, digest: other }], updatedAt: Date.now() };
    await fx.registry.publish(fake, TTL_MS);
    await fx.router.deps.directory.refresh();
    expect(fx.router.deps.directory.all().some((w) => w.id === "tail-fake")).toBe(true);
    expect(fx.router.deps.directory.pipelines(LLM).flatMap((p) => p.stages.flatMap((s) => s.replicas.map((w) => w.id)))).not.toContain("tail-fake");
    await fx.registry.remove("tail-fake");
  }, 60_000);

  it("leases apply to a pipeline as to a worker: a leased replica is left out for others and put first for its holder; with a stage's every replica leased the pipeline is the holders' alone, each fenced on its own", async () => {
    const t = await createTenant(fx.db.db, "split-holder");
    if (!t.ok) throw new Error("tenant");
    const holder = (await createKey(fx.db.db, t.tenant.id)).key;
    const lease = async (worker: string) => {
      const res = await fetch(`${fx.router.url}/v1/leases`, { method: "POST", headers: { authorization: `Bearer ${holder}`, "content-type": "application/json" }, body: JSON.stringify({ worker, duration_s: 30 }) });
      expect(res.status).toBe(201);
      return ((await res.json()) as { id: string }).id;
    };
    const release = (id: string) => fetch(`${fx.router.url}/v1/leases/${id}`, { method: "DELETE", headers: { authorization: `Bearer ${holder}` } });
    const ask = (key: string, extra: Record<string, string> = {}) =>
      fetch(`${fx.router.url}/v1/chat/completions`, { method: "POST", headers: { authorization: `Bearer ${key}`, "content-type": "application/json", "x-switchyard-debug": "route", ...extra }, body: JSON.stringify({ model: LLM, messages: story, max_tokens: 2 }) });
    const chain = (res: Response) => /^pipeline\[[^\]]*\]/.exec(res.headers.get("x-switchyard-route") ?? "")?.[0];

    // One tail leased: the others still get the pipeline, through the tail nobody holds (the head is sent only that one).
    const b = await lease("tail-b");
    const other = await ask(fx.key);
    expect(other.status).toBe(200);
    expect(chain(other)).toBe("pipeline[head 0-15 > tail-a 15-30]");
    // The holder gets its leased tail first (the other as its replica).
    const mine = await ask(holder, { "x-switchyard-lease": b });
    expect(mine.status).toBe(200);
    expect(chain(mine)).toBe("pipeline[head 0-15 > tail-b|tail-a 15-30]");

    // Both tails leased: no pipeline is left for others; each lease's holder runs on its own tail only.
    const a = await lease("tail-a");
    const blocked = await ask(fx.key);
    expect(blocked.status).toBe(503);
    expect(((await blocked.json()) as { error: { message: string } }).error.message).toMatch(/leased by another tenant/);
    const onA = await ask(holder, { "x-switchyard-lease": a });
    expect(onA.status).toBe(200);
    expect(chain(onA)).toBe("pipeline[head 0-15 > tail-a 15-30]");
    // Each tail checks its own lease's tokens: tail-a's newer lease does not make tail-b's stale.
    const backOnB = await ask(holder, { "x-switchyard-lease": b });
    expect(backOnB.status, await backOnB.clone().text()).toBe(200);
    expect(chain(backOnB)).toBe("pipeline[head 0-15 > tail-b 15-30]");

    await Promise.all([release(a), release(b)]);
    await waitFor(async () => /> (tail-a\|tail-b|tail-b\|tail-a) 15-30\]$/.test(chain(await ask(fx.key)) ?? ""), { timeoutMs: 5000, what: "the pipeline with both tails free again" });
  }, 60_000);

  it("a superseded lease holder is refused by the leased tail itself, even through a head that never saw the newer lease: 409 stale_fencing_token, as from a whole worker, streamed or not, and for hidden states", async () => {
    const t = await createTenant(fx.db.db, "split-fence");
    if (!t.ok) throw new Error("tenant");
    const holder = (await createKey(fx.db.db, t.tenant.id)).key;
    const lease = async () => {
      const res = await fetch(`${fx.router.url}/v1/leases`, { method: "POST", headers: { authorization: `Bearer ${holder}`, "content-type": "application/json" }, body: JSON.stringify({ worker: "tail-b", duration_s: 30 }) });
      expect(res.status).toBe(201);
      return (await res.json()) as { id: string; fencing_token: number };
    };
    const release = (id: string) => fetch(`${fx.router.url}/v1/leases/${id}`, { method: "DELETE", headers: { authorization: `Bearer ${holder}` } });
    const viaRouter = (leaseId: string) =>
      fetch(`${fx.router.url}/v1/chat/completions`, { method: "POST", headers: { authorization: `Bearer ${holder}`, "content-type": "application/json", "x-switchyard-debug": "route", "x-switchyard-lease": leaseId }, body: JSON.stringify({ model: LLM, messages: story, temperature: 0, max_tokens: 8 }) });

    // The old lease on tail-b, used; released; a newer one on tail-b, used (through the router's head).
    const old = await lease();
    expect((await viaRouter(old.id)).status).toBe(200);
    await release(old.id);
    const newer = await lease();
    expect(newer.fencing_token).toBeGreaterThan(old.fencing_token);
    const ok = await viaRouter(newer.id);
    expect(ok.status, await ok.clone().text()).toBe(200);
    expect(ok.headers.get("x-switchyard-route")).toMatch(/^pipeline\[head 0-15 > tail-b(\|tail-a)? 15-30\]/);

    // The stale holder's request reaches tail-b through a second head (another
    // pipeline sharing the tail; or the first head restarted): it has no
    // memory of the newer lease, so only tail-b can refuse — and does.
    const head2 = await startAgent({ ...agentOpts, registry: new MemoryRegistryStore(), workerId: "head-2", layers: { start: 0, end: 15 } });
    try {
      await head2.supervisor.whenReady();
      const tailB = fx.router.deps.directory.all().find((w) => w.id === "tail-b")!;
      const route = encodeShardRoute(signShardRoute({ model: LLM, digest: head2.ctx.shardHead!.digest, stages: [{ start: 15, end: 30, hops: [{ id: tailB.id, url: tailB.url }] }] }, () => WORKER_TOKEN, Date.now() + 60_000)!);
      const asHolder = (token: number, stream: boolean) =>
        fetch(`${head2.url}/v1/chat/completions`, {
          method: "POST",
          headers: { authorization: `Bearer ${WORKER_TOKEN}`, "content-type": "application/json", [SHARD_ROUTE_HEADER]: route, "x-switchyard-fencing-token": String(token), [FENCING_WORKER_HEADER]: "tail-b" },
          body: JSON.stringify({ model: LLM, messages: story, temperature: 0, max_tokens: 8, stream }),
        });
      // What a whole worker answers a superseded token with (its own tokens: 2, then 1).
      const wholeAsk = (token: number) =>
        fetch(`${whole.url}/v1/chat/completions`, { method: "POST", headers: { authorization: `Bearer ${WORKER_TOKEN}`, "content-type": "application/json", "x-switchyard-fencing-token": String(token) }, body: JSON.stringify({ model: LLM, messages: story, max_tokens: 1 }) });
      expect((await wholeAsk(2)).status).toBe(200);
      const wholeStale = await wholeAsk(1);
      const shape = async (res: Response) => {
        const body = (await res.json()) as { error: Record<string, unknown> };
        return { status: res.status, keys: Object.keys(body), error: { ...body.error, message: typeof body.error.message } };
      };
      const want = await shape(wholeStale);
      expect(want).toEqual({ status: 409, keys: ["error"], error: { message: "string", type: "invalid_request_error", param: null, code: "stale_fencing_token" } });
      for (const stream of [false, true]) {
        const stale = await asHolder(old.fencing_token, stream);
        expect(stale.headers.get("content-type")).toMatch(/application\/json/);
        const text = await stale.clone().text();
        expect(await shape(stale), text).toEqual(want);
        expect(text).toMatch(new RegExp(`fencing token ${old.fencing_token} is older than ${newer.fencing_token}`));
      }
      // Hidden states from tail-b's layers are fenced the same way.
      const hidden = (token: number) =>
        fetch(`${head2.url}/v1/hidden_states`, {
          method: "POST",
          headers: { authorization: `Bearer ${WORKER_TOKEN}`, "content-type": "application/json", [SHARD_ROUTE_HEADER]: route, "x-switchyard-fencing-token": String(token), [FENCING_WORKER_HEADER]: "tail-b" },
          body: JSON.stringify({ model: LLM, input: "hi", layers: [20] }),
        });
      expect(await shape(await hidden(old.fencing_token))).toEqual(want);
      expect((await hidden(newer.fencing_token)).status).toBe(200);
      // The newer holder still runs through that head, on tail-b.
      const fresh = await asHolder(newer.fencing_token, false);
      expect(fresh.status, await fresh.clone().text()).toBe(200);
      expect(((await fresh.json()) as { choices: { message: { content: string } }[] }).choices[0]!.message.content).toBe(await reference(8));
    } finally {
      await head2.stop();
      await release(newer.id);
    }
    const chain = async () => (await fetch(`${fx.router.url}/v1/chat/completions`, { method: "POST", headers: { ...auth(), "x-switchyard-debug": "route" }, body: JSON.stringify({ model: LLM, messages: story, max_tokens: 1 }) })).headers.get("x-switchyard-route") ?? "";
    await waitFor(async () => /> (tail-a\|tail-b|tail-b\|tail-a) 15-30\]/.test(await chain()), { timeoutMs: 5000, what: "the pipeline with both tails free again" });
  }, 120_000);

  it("a stream rebuilt around a lost tail onto a replica that has seen a newer lease ends with the one SSE error event: 409 stale_fencing_token, never text past the refusal", async () => {
    const t = await createTenant(fx.db.db, "split-rebuild-fence");
    if (!t.ok) throw new Error("tenant");
    const holder = (await createKey(fx.db.db, t.tenant.id)).key;
    const lease = async () => {
      const res = await fetch(`${fx.router.url}/v1/leases`, { method: "POST", headers: { authorization: `Bearer ${holder}`, "content-type": "application/json" }, body: JSON.stringify({ worker: "tail-a", duration_s: 30 }) });
      expect(res.status).toBe(201);
      return (await res.json()) as { id: string; fencing_token: number };
    };
    const release = (id: string) => fetch(`${fx.router.url}/v1/leases/${id}`, { method: "DELETE", headers: { authorization: `Bearer ${holder}` } });
    // tail-a sees a lease's token, then a newer lease's: the first one's holder is stale there.
    const old = await lease();
    await release(old.id);
    const newer = await lease();
    const used = await fetch(`${fx.router.url}/v1/chat/completions`, { method: "POST", headers: { authorization: `Bearer ${holder}`, "content-type": "application/json", "x-switchyard-lease": newer.id }, body: JSON.stringify({ model: LLM, messages: story, max_tokens: 2 }) });
    expect(used.status, await used.clone().text()).toBe(200);
    await release(newer.id);

    // A third tail the stream starts on (the fence names tail-a, so tail-c serves it); tail-a is its replica.
    spawnTail("tail-c");
    const tailC = await waitFor(() => fx.router.deps.directory.all().find((w) => w.id === "tail-c" && w.state === "ready"), { timeoutMs: 90_000, what: () => `tail-c ready (${tails.get("tail-c")!.stderr().slice(-400)})` });
    const tailA = fx.router.deps.directory.all().find((w) => w.id === "tail-a")!;
    const route = encodeShardRoute(signShardRoute({ model: LLM, digest: head.ctx.shardHead!.digest, stages: [{ start: 15, end: 30, hops: [{ id: tailC.id, url: tailC.url }, { id: tailA.id, url: tailA.url }] }] }, () => WORKER_TOKEN, Date.now() + 60_000)!);
    const pipeline = head.ctx.shardHead!.pipeline as PipelineHead;
    const before = pipeline.rebuilt.sequences;
    const res = await fetch(`${head.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${WORKER_TOKEN}`, "content-type": "application/json", [SHARD_ROUTE_HEADER]: route, "x-switchyard-fencing-token": String(old.fencing_token), [FENCING_WORKER_HEADER]: "tail-a" },
      body: JSON.stringify({ model: LLM, messages: story, temperature: 0, max_tokens: 64, stream: true }),
    });
    expect(res.status).toBe(200);
    const reader = res.body!.getReader();
    const dec = new TextDecoder();
    let raw = "";
    let killed = false;
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      raw += dec.decode(value, { stream: true });
      if (!killed && raw.includes('"content":"')) {
        killed = true;
        tails.get("tail-c")!.child.kill("SIGKILL");
      }
    }
    expect(killed).toBe(true);
    const events = raw
      .split("\n\n")
      .filter((e) => e.startsWith("data: "))
      .map((e) => e.slice(6));
    const errors = events.filter((e) => e.startsWith('{"error"'));
    // One error event, the last thing sent: the refusal, in a whole worker's words.
    expect(errors, raw.slice(-2000)).toHaveLength(1);
    expect(events.at(-1)).toBe(errors[0]);
    const error = (JSON.parse(errors[0]!) as { error: { code: string; message: string } }).error;
    expect(error.code).toBe("stale_fencing_token");
    expect(error.message).toMatch(new RegExp(`fencing token ${old.fencing_token} is older than ${newer.fencing_token}`));
    // The text before it is a prefix of the unsplit model's: nothing was generated on the refused replica.
    let text = "";
    for (const e of events.slice(0, -1)) text += (JSON.parse(e) as { choices: { delta?: { content?: string } }[] }).choices[0]?.delta?.content ?? "";
    expect((await reference(64)).startsWith(text)).toBe(true);
    // Loss → rebuild was tried (and refused), not counted as a rebuilt sequence.
    expect(pipeline.rebuilt.sequences).toBe(before);
    await tails.get("tail-c")!.exited;
    tails.delete("tail-c");
    await waitFor(async () => !fx.router.deps.directory.all().some((w) => w.id === "tail-c"), { timeoutMs: TTL_MS + 3000, what: "tail-c's record to expire" });
  }, 180_000);

  it("replaces a tail killed mid-stream with its live replica: same text as the unsplit model, no error event", async () => {
    const maxTokens = 64;
    const want = await reference(maxTokens);
    const pipeline = head.ctx.shardHead!.pipeline as PipelineHead;
    const before = pipeline.rebuilt.sequences;
    let killed = "";
    const { text, events, gapMs } = await streamChat(maxTokens, (route) => {
      // The head uses the first replica the route names: that one dies.
      killed = tailOrder(route)[0]!;
      tails.get(killed)!.child.kill("SIGKILL");
    });
    expect(killed).toMatch(/^tail-[ab]$/);
    expect(events.filter((e) => e.startsWith('{"error"'))).toEqual([]);
    expect(events.at(-1)).toBe("[DONE]");
    expect(text).toBe(want);
    expect(pipeline.rebuilt.sequences).toBe(before + 1);
    // The stall the client sees: detecting the loss, reopening, re-prefilling (generous: a loaded box).
    expect(gapMs).toBeGreaterThan(0);
    expect(gapMs).toBeLessThan(10_000);
    await tails.get(killed)!.exited;
    // The model stays listed: the other tail still completes a pipeline.
    await waitFor(async () => !fx.router.deps.directory.all().some((w) => w.id === killed), { timeoutMs: TTL_MS + 3000, what: "the killed tail's record to expire" });
    expect(await listed()).toContain(LLM);
  }, 120_000);

  it("with no replica left, the stream ends with one SSE error event and the model leaves /v1/models within the heartbeat TTL", async () => {
    const [left] = [...tails.keys()].filter((id) => tails.get(id)!.child.exitCode === null && tails.get(id)!.child.signalCode === null);
    expect(left).toBeDefined();
    let killedAt = 0;
    const { events } = await streamChat(200, () => {
      tails.get(left!)!.child.kill("SIGKILL");
      killedAt = Date.now();
    });
    const errors = events.filter((e) => e.startsWith('{"error"'));
    expect(errors).toHaveLength(1);
    expect(events.at(-1)).toBe(errors[0]);
    await waitFor(async () => !(await listed()).includes(LLM), { timeoutMs: TTL_MS + 3000, intervalMs: 100, what: "the model to leave /v1/models" });
    // Heartbeat TTL + the router's registry poll (50 ms here) + this loop's step, generously.
    expect(Date.now() - killedAt).toBeLessThan(TTL_MS + 2000);
  }, 120_000);

  it("three shards: a last shard lost behind a middle one is reported LOST up the chain, and every stream over that path is rebuilt around it (never the healthy middle blamed)", async () => {
    // A second pipeline of the same file: 0-10 > 10-20 > 20-30 ×2 (the 0-15 head has no 15-30 tail left).
    const [h3, m3] = await Promise.all([
      startAgent({ ...agentOpts, registry: fx.registry, workerId: "h3", layers: { start: 0, end: 10 } }),
      startAgent({ ...agentOpts, registry: fx.registry, workerId: "m3", layers: { start: 10, end: 20 } }),
    ]);
    try {
      spawnTail("t3-a", "20-30");
      spawnTail("t3-b", "20-30");
      await waitFor(() => fx.router.deps.directory.pipelines(LLM).find((p) => p.head.id === "h3")?.stages[1]?.replicas.length === 2, { timeoutMs: 90_000, what: "the 3-shard pipeline with both last shards" });
      const maxTokens = 200;
      const want = await reference(maxTokens);
      const pipeline = h3.ctx.shardHead!.pipeline as PipelineHead;
      // Four streams on one path, so one connection from the head to the
      // middle shard: when the last shard dies, some are mid-step and some
      // wait for their next one. Before, the first loss retired that shared
      // connection and the waiting ones stepped on a new connection where
      // they were never opened (an error event), or blamed the middle shard.
      const streams = 4;
      const routes: string[] = [];
      const running = Promise.all(Array.from({ length: streams }, () => streamChat(maxTokens, (r) => void routes.push(r))));
      await waitFor(() => pipeline.sequences === streams && routes.length === streams, { timeoutMs: 60_000, intervalMs: 5, what: "four streams decoding through the head at once" });
      // The router may order the two last shards differently per stream: the
      // one most streams run through dies (at least two of the four).
      const lastOf = (route: string) => /> ([^ ]+) 20-30\]/.exec(route)?.[1]?.split("|")[0] ?? "";
      const onIt = (tail: string) => routes.filter((r) => lastOf(r) === tail).length;
      const killed = onIt("t3-a") >= onIt("t3-b") ? "t3-a" : "t3-b";
      const lost = onIt(killed);
      expect(lost).toBeGreaterThanOrEqual(2);
      tails.get(killed)?.child.kill("SIGKILL");
      const results = await running;
      expect(killed).toMatch(/^t3-[ab]$/);
      for (const { text, events } of results) {
        expect(events.filter((e) => e.startsWith('{"error"'))).toEqual([]);
        expect(events.at(-1)).toBe("[DONE]");
        expect(text).toBe(want);
      }
      // Each stream through the lost shard was rebuilt once, around it only.
      expect(pipeline.rebuilt.sequences).toBe(lost);
      expect(pipeline.rebuilt.lastMs).toBeGreaterThan(0);
      expect(pipeline.rebuilt.lastMs).toBeLessThan(10_000);
      // The middle shard was never taken for lost: a new stream goes through it.
      const after = await streamChat(16, () => {});
      expect(after.events.at(-1)).toBe("[DONE]");
    } finally {
      await Promise.all([h3.stop(), m3.stop()]);
    }
  }, 180_000);
});
