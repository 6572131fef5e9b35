// The worker's listener as the routers meet it (the real agent and engine):
// an idle connection is kept 65 s, above the routers' own 30 s, so the
// router closes first and never sends onto a connection the worker is
// closing; and the accept queue is 4096 deep, not Node's 511, so a fleet of
// routers opening connections together (a burst of streams, the worker back
// from a restart) waits in it instead of on SYN retransmits.
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { AgentHandle } from "@switchyard/agent";
import { startTestRouter, type RouterFixture } from "../helpers/router.ts";
import { startTestWorker, WORKER_TOKEN } from "../helpers/worker.ts";

let fx: RouterFixture;
let agent: AgentHandle;

beforeAll(async () => {
  fx = await startTestRouter({ "workers.token": WORKER_TOKEN });
  agent = await startTestWorker(fx, { id: "listener-w", models: ["all-minilm-l6-v2"] });
}, 120_000);

afterAll(async () => {
  await agent?.stop();
  await fx?.close();
});

describe("the worker's listener", () => {
  it("says its idle connections live 65 s, longer than the router's pool keeps them (30 s)", async () => {
    const res = await fetch(`${agent.url}/healthz`);
    await res.arrayBuffer();
    expect(res.headers.get("keep-alive")).toBe("timeout=65");
  });

  it("accepts into a 4096-deep queue (the kernel's own figure for the listening socket)", () => {
    const port = new URL(agent.url).port;
    // For a listening socket, ss's Send-Q column is the backlog it was given (capped by somaxconn).
    const line = execFileSync("ss", ["-ltnH", `sport = :${port}`], { encoding: "utf8" }).trim().split("\n")[0] ?? "";
    const sendQ = Number(line.split(/\s+/)[2]);
    const cap = Number(readFileSync("/proc/sys/net/core/somaxconn", "utf8"));
    expect(sendQ, line).toBe(Math.min(4096, cap));
    expect(sendQ).toBeGreaterThan(511);
  });
});
