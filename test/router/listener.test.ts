// The router's public listener as clients and load balancers meet it:
//   - a burst of new connections while the router cannot take them up (its
//     event loop busy, here stopped with SIGSTOP) waits in the kernel's
//     accept queue, router.listenBacklog deep, instead of having its SYNs
//     dropped beyond Node's 511 and each client waiting out a 1 s, 3 s, 7 s…
//     retransmit (past capacity that was most of the router's lost rate);
//   - an idle keep-alive connection stays open router.keepAliveTimeoutMs
//     (75 s), above a load balancer's idle timeout, so the balancer closes
//     it first: a request it sends as the router closes would otherwise meet
//     a dead socket, a POST it cannot retry.
// With --processes 2 the primary holds the listening socket and hands out
// connections: the same burst is stopped there.
import { connect, type Socket } from "node:net";
import { readFileSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { spawnRouter, type RouterProc } from "../helpers/router-proc.ts";
import { createTestDb, createTestRedis, REDIS_URL, sleep, waitFor, type TestDb, type TestRedis } from "../helpers/env.ts";

let db: TestDb;
let redis: TestRedis;
let one: RouterProc;
let two: RouterProc;

/** Node's own listen backlog, the figure the burst must exceed. */
const NODE_DEFAULT_BACKLOG = 511;
const BURST = 900;

/** Until the ×2 router's primary lists both processes ready (/healthz answers once one serves). */
function bothReady(r: RouterProc) {
  return waitFor(async () => {
    const body = (await fetch(`${r.adminUrl}/readyz`).then((x) => x.json(), () => ({}))) as { processes?: Array<{ ready: boolean }> };
    return body.processes?.length === 2 && body.processes.every((p) => p.ready);
  }, { timeoutMs: 60_000, what: "two ready router processes" });
}

beforeAll(async () => {
  db = await createTestDb();
  redis = await createTestRedis();
  const env = { DATABASE_URL: db.url, REDIS_URL, SWITCHYARD_REDIS__KEY_PREFIX: redis.prefix };
  [one, two] = await Promise.all([spawnRouter(env, "router"), spawnRouter({ ...env, SWITCHYARD_ROUTER__PROCESSES: "2" }, "router×2")]);
  await bothReady(two);
}, 120_000);

afterAll(async () => {
  await Promise.all([one?.stop(), two?.stop()]);
  await redis?.cleanup();
  await db?.drop();
});

interface Conn {
  socket: Socket;
  connected: boolean;
  data: string;
  error?: string;
  ended: boolean;
}

/** Opens `n` connections to `url`, each sending one GET /healthz as soon as its handshake completes. */
function burst(url: string, n: number): Conn[] {
  const { hostname, port } = new URL(url);
  return Array.from({ length: n }, () => {
    const c: Conn = { socket: connect({ host: hostname, port: Number(port) }), connected: false, data: "", ended: false };
    c.socket.setEncoding("utf8");
    c.socket.on("connect", () => {
      c.connected = true;
      c.socket.write(`GET /healthz HTTP/1.1\r\nHost: ${hostname}\r\nConnection: close\r\n\r\n`);
    });
    c.socket.on("data", (d: string) => (c.data += d));
    c.socket.on("error", (e: NodeJS.ErrnoException) => (c.error = e.code ?? e.message));
    c.socket.on("close", () => (c.ended = true));
    return c;
  });
}

/**
 * While `pid` is stopped (it cannot accept), a burst of `n` connects; then it
 * runs again and answers them (or, `answers: false`, the burst is given up).
 */
async function burstWhileStopped(url: string, pid: number, opts: { n?: number; answers?: boolean } = {}): Promise<{ connectedWhileStopped: number; conns: Conn[] }> {
  let conns: Conn[] = [];
  process.kill(pid, "SIGSTOP");
  let connectedWhileStopped = 0;
  try {
    conns = burst(url, opts.n ?? BURST);
    // The kernel completes each handshake while the accept queue has room:
    // well under a second on loopback. Past the queue, a dropped SYN is
    // retried after 1 s and 3 s — still dropped, as nothing is accepted.
    const deadline = performance.now() + 3_000;
    while (performance.now() < deadline && conns.some((c) => !c.connected)) await sleep(50);
    connectedWhileStopped = conns.filter((c) => c.connected).length;
  } finally {
    process.kill(pid, "SIGCONT");
  }
  if (opts.answers === false) for (const c of conns) c.socket.destroy();
  else await waitFor(() => conns.every((c) => c.ended), { timeoutMs: 30_000, what: "every connection answered and closed" });
  return { connectedWhileStopped, conns };
}

describe("the router's listener", () => {
  it("the kernel lets a burst queue this deep (precondition: net.core.somaxconn caps every listener's backlog)", () => {
    expect(Number(readFileSync("/proc/sys/net/core/somaxconn", "utf8")), "raise net.core.somaxconn: the burst below needs a queue above Node's 511").toBeGreaterThanOrEqual(BURST);
  });

  for (const [name, router] of [["one process", () => one], ["--processes 2 (the primary accepts)", () => two]] as const) {
    it(`${name}: a burst of ${BURST} connections while it cannot accept waits in the accept queue, and every one is answered`, async () => {
      const r = router();
      const { connectedWhileStopped, conns } = await burstWhileStopped(r.url, r.proc.child.pid!);
      // With Node's default backlog, only 512 handshakes complete.
      expect(connectedWhileStopped).toBeGreaterThan(NODE_DEFAULT_BACKLOG + 1);
      expect(connectedWhileStopped).toBe(BURST);
      expect(conns.filter((c) => c.error).map((c) => c.error)).toEqual([]);
      expect(conns.filter((c) => !c.data.startsWith("HTTP/1.1 200")).length).toBe(0);
    }, 60_000);
  }

  it("a backlog above the kernel's cap is served at the cap, and the router says so at start (once with --processes 2)", async () => {
    const cap = Number(readFileSync("/proc/sys/net/core/somaxconn", "utf8"));
    const ask = Math.min(65_535, cap * 2);
    const env = { DATABASE_URL: db.url, REDIS_URL, SWITCHYARD_REDIS__KEY_PREFIX: redis.prefix, SWITCHYARD_ROUTER__LISTEN_BACKLOG: String(ask) };
    const [r, r2] = await Promise.all([spawnRouter(env, "router, backlog above somaxconn"), spawnRouter({ ...env, SWITCHYARD_ROUTER__PROCESSES: "2" }, "router×2, backlog above somaxconn")]);
    try {
      const out = await waitFor(() => r.proc.output().includes("raise net.core.somaxconn") && r.proc.output(), { timeoutMs: 10_000, what: () => `the somaxconn warning in: ${r.proc.output().slice(-500)}` });
      expect(out).toContain(`"somaxconn":${cap}`);
      expect(out).toContain(`"listenBacklog":${ask}`);
      // The router still listens and answers.
      expect((await fetch(`${r.url}/healthz`)).status).toBe(200);
      await bothReady(r2);
      expect(r2.proc.output().split("raise net.core.somaxconn").length - 1).toBe(1);
    } finally {
      await Promise.all([r.stop(), r2.stop()]);
    }
    // At the default, no such warning.
    expect(one.proc.output()).not.toContain("somaxconn");
  }, 60_000);

  it("a burst past a small backlog shows on /metrics as listen overflows, counted once with --processes 2", async () => {
    const env = { DATABASE_URL: db.url, REDIS_URL, SWITCHYARD_REDIS__KEY_PREFIX: redis.prefix, SWITCHYARD_ROUTER__LISTEN_BACKLOG: "16" };
    const [small, smallTwo] = await Promise.all([spawnRouter(env, "router, backlog 16"), spawnRouter({ ...env, SWITCHYARD_ROUTER__PROCESSES: "2" }, "router×2, backlog 16")]);
    const series = async (url: string, name: string) => {
      const text = await (await fetch(url)).text();
      const line = text.split("\n").find((l) => l.startsWith(`${name} `));
      return line ? Number(line.slice(name.length + 1)) : NaN;
    };
    const overflows = (r: RouterProc, query = "") => series(`${r.adminUrl}/metrics${query}`, "switchyard_listen_overflows_total");
    try {
      await bothReady(smallTwo);
      for (const r of [small, smallTwo]) {
        const before = await overflows(r);
        expect(before).toBeGreaterThanOrEqual(0);
        // 17 handshakes complete; each other SYN is dropped, and again at its retransmits (given up here: they come back 7 s, 15 s… later).
        const { connectedWhileStopped } = await burstWhileStopped(r.url, r.proc.child.pid!, { n: 100, answers: false });
        expect(connectedWhileStopped).toBeLessThan(100);
        await waitFor(async () => (await overflows(r)) >= before + 1, { timeoutMs: 10_000, what: "the overflows on /metrics" });
      }
      // Each process reads the namespace's one count: the aggregate is theirs once, not their sum.
      const pids = ((await (await fetch(`${smallTwo.adminUrl}/readyz`)).json()) as { processes: Array<{ pid: number }> }).processes.map((p) => p.pid);
      const own = await Promise.all(pids.map((pid) => overflows(smallTwo, `?process=${pid}`)));
      const total = await overflows(smallTwo);
      for (const v of own) expect(v).toBeGreaterThan(0);
      expect(total).toBeGreaterThanOrEqual(Math.max(...own));
      expect(total).toBeLessThan(own[0]! + own[1]!);
    } finally {
      await Promise.all([small.stop(), smallTwo.stop()]);
    }
  }, 120_000);

  it("an idle keep-alive connection outlives Node's 5 s default, as the Keep-Alive header says", async () => {
    const { hostname, port } = new URL(one.url);
    const socket = connect({ host: hostname, port: Number(port) });
    socket.setEncoding("utf8");
    let data = "";
    let closedAt: number | undefined;
    socket.on("data", (d: string) => (data += d));
    socket.on("close", () => (closedAt = performance.now()));
    await new Promise<void>((resolve, reject) => socket.once("connect", resolve).once("error", reject));
    const get = `GET /healthz HTTP/1.1\r\nHost: ${hostname}\r\n\r\n`;
    const answers = () => data.match(/HTTP\/1\.1 200/g)?.length ?? 0;
    try {
      socket.write(get);
      await waitFor(() => answers() === 1, { timeoutMs: 5_000, what: "the first answer" });
      expect(data.toLowerCase()).toContain("keep-alive: timeout=75\r\n");
      await sleep(6_000);
      expect(closedAt, "the router closed the idle connection").toBeUndefined();
      socket.write(get);
      await waitFor(() => answers() === 2, { timeoutMs: 5_000, what: "the second answer on the same connection" });
    } finally {
      socket.destroy();
    }
  }, 30_000);
});
