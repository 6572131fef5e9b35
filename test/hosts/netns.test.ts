// The namespace fabric itself (test/helpers/netns.ts): hosts reach each other
// only over the bridge; a cut cable and a partition cut exactly the paths they
// name; everything is removed afterwards, on exit, and — after a crash — by
// the next run, which leaves a live run's namespaces alone.
import { execFileSync, spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { waitFor } from "../helpers/env.ts";
import { cleanupStale, Fabric } from "../helpers/netns.ts";

const helper = path.resolve(import.meta.dirname, "../helpers/netns.ts");
const nsList = () => execFileSync("ip", ["netns", "list"], { encoding: "utf8" });
/** Whether `pid` is a live process (a killed one not yet reaped by its new parent is a zombie: not running). */
function running(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return !/^[ZX]/.test(stat.slice(stat.lastIndexOf(")") + 2));
  } catch {
    return false;
  }
}

/** A link line naming `tag` (veths show as name@peer). */
const linkNamed = (tag: string) => new RegExp(`^\\d+: ${tag}[@:]`, "m");
const links = () => execFileSync("ip", ["-o", "link", "show"], { encoding: "utf8" });

let f: Fabric;

beforeAll(async () => {
  f = Fabric.create();
  for (const h of ["a", "b", "c"]) {
    const host = f.addHost(h);
    const p = f.spawn(h, process.execPath, ["-e", `require("node:net").createServer((s) => s.end("hi")).listen(7000, "${host.ip}", () => console.log("up"))`]);
    await p.waitFor(/up/, 10_000);
  }
}, 60_000);

afterAll(async () => {
  await f?.destroy();
});

/** Whether `from` (a host, or the test process for "client") completes a TCP connect to `to` within a second. */
async function reaches(from: string, to: string): Promise<boolean> {
  const target = f.host(to).ip;
  const probe = ["-c", `exec 3<>/dev/tcp/${target}/7000 && head -c 2 <&3`];
  if (from === "client") {
    const r = await new Promise<{ code: number | null; out: string }>((resolve) => {
      const c = spawn("timeout", ["1", "bash", ...probe], { stdio: ["ignore", "pipe", "ignore"] });
      let out = "";
      c.stdout.on("data", (d: Buffer) => (out += d.toString()));
      c.once("close", (code) => resolve({ code, out }));
    });
    return r.code === 0 && r.out === "hi";
  }
  const r = await f.run(from, "timeout", ["1", "bash", ...probe]);
  return r.code === 0 && r.stdout === "hi";
}

describe("namespace fabric", () => {
  it("puts each host on its own address, reachable from the others and from the test process, not over loopback", async () => {
    expect(new Set([...f.hosts.values()].map((h) => h.ip)).size).toBe(3);
    for (const h of f.hosts.values()) expect(h.ip).toMatch(new RegExp(`^${f.subnet.replace(/\./g, "\\.")}\\.\\d+$`));
    expect(f.subnet).toMatch(/^10\.231\.\d+$/);
    for (const [from, to] of [["client", "a"], ["client", "b"], ["a", "b"], ["b", "c"], ["c", "a"]]) expect(await reaches(from!, to!), `${from} → ${to}`).toBe(true);
    // Each host's own loopback is its own: nothing listens on 127.0.0.1:7000 inside a (the server is on a's address).
    expect((await f.run("a", "timeout", ["1", "bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/7000"])).code).not.toBe(0);
  });

  it("a cut cable isolates that host only, and restoring it brings it back", async () => {
    f.cutLink("a");
    try {
      expect(await reaches("client", "a")).toBe(false);
      expect(await reaches("b", "a")).toBe(false);
      expect(await reaches("b", "c")).toBe(true);
      expect(await reaches("client", "c")).toBe(true);
    } finally {
      f.restoreLink("a");
    }
    await waitFor(() => reaches("client", "a"), { timeoutMs: 5000, what: "a reachable after restore" });
    expect(await reaches("b", "a")).toBe(true);
  });

  it("a partition drops the path between two hosts in both directions and nothing else; healing restores it", async () => {
    f.partition("a", "b");
    try {
      expect(await reaches("a", "b")).toBe(false);
      expect(await reaches("b", "a")).toBe(false);
      expect(await reaches("a", "c")).toBe(true);
      expect(await reaches("client", "a")).toBe(true);
      expect(await reaches("client", "b")).toBe(true);
    } finally {
      f.heal("a", "b");
    }
    expect(await reaches("a", "b")).toBe(true);
    expect(await reaches("b", "a")).toBe(true);
  });

  it("removes a crashed run's namespaces, links and processes before building, and leaves a live run's alone", async () => {
    // A run that dies by SIGKILL (no exit handler runs) leaves its fabric behind, a process inside it.
    const script = `import { Fabric } from ${JSON.stringify(helper)}; const f = Fabric.create(); f.addHost("x"); f.spawn("x", "sleep", ["600"]); console.log("built " + f.tag); setInterval(() => {}, 1000);`;
    const crashed = spawn(process.execPath, ["--import", "tsx", "--input-type=module", "-e", script], { stdio: ["ignore", "pipe", "inherit"] });
    const tag = await new Promise<string>((resolve, reject) => {
      let out = "";
      crashed.stdout.on("data", (d: Buffer) => {
        out += d.toString();
        const m = /built (\S+)/.exec(out);
        if (m) resolve(m[1]!);
      });
      crashed.once("exit", (code) => reject(new Error(`child exited ${code} before building`)));
    });
    await waitFor(() => execFileSync("ip", ["netns", "pids", `${tag}-x`], { encoding: "utf8" }).trim() !== "", { timeoutMs: 5000, what: "the crashed run's process inside its namespace" });
    const inside = Number(execFileSync("ip", ["netns", "pids", `${tag}-x`], { encoding: "utf8" }).trim().split(/\s+/)[0]);
    crashed.kill("SIGKILL");
    await new Promise((r) => crashed.once("exit", r));
    expect(running(inside)).toBe(true);
    expect(nsList()).toContain(`${tag}-x`);
    expect(links()).toMatch(linkNamed(tag));
    // A live run (this process's namespaces) is never touched.
    const removed = cleanupStale();
    expect(removed).toEqual(expect.arrayContaining([`${tag}-x`, `${tag}-sw`]));
    expect(removed.some((n) => n.startsWith(`syh${process.pid}_`))).toBe(false);
    expect(nsList()).not.toContain(`${tag}-`);
    expect(links()).not.toMatch(linkNamed(tag));
    await waitFor(() => !running(inside), { timeoutMs: 3000, what: "the process the crashed run left inside killed" });
    expect(await reaches("client", "a")).toBe(true);
  }, 60_000);

  it("a run that exits without tearing down still leaves nothing (exit handler)", async () => {
    const script = `import { Fabric } from ${JSON.stringify(helper)}; const f = Fabric.create(); f.addHost("y"); f.spawn("y", "sleep", ["600"]); console.log("built " + f.tag); setTimeout(() => process.exit(3), 200);`;
    const child = spawn(process.execPath, ["--import", "tsx", "--input-type=module", "-e", script], { stdio: ["ignore", "pipe", "inherit"] });
    let out = "";
    child.stdout.on("data", (d: Buffer) => (out += d.toString()));
    const code = await new Promise((r) => child.once("exit", r));
    expect(code).toBe(3);
    const tag = /built (\S+)/.exec(out)![1]!;
    expect(nsList()).not.toContain(`${tag}-`);
    expect(links()).not.toMatch(linkNamed(tag));
  }, 60_000);

  it("destroy removes every namespace, link and process of the fabric", async () => {
    const g = Fabric.create();
    g.addHost("z");
    const sleeper = g.spawn("z", "sleep", ["600"]);
    expect(g.leftovers().length).toBeGreaterThan(0);
    await g.destroy();
    expect(g.leftovers()).toEqual([]);
    expect(sleeper.child.exitCode !== null || sleeper.child.signalCode !== null).toBe(true);
  });
});
