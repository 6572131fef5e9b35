import { MemoryRegistryStore } from "@switchyard/state";
import { describe, expect, it } from "vitest";
import type { Backend } from "../backends/types.ts";
import { loadConfig } from "../config.ts";
import { silentLogger } from "../observability/log.ts";
import { BackendChain } from "./chain.ts";
import { WorkerDirectory } from "./directory.ts";
import { requestClass } from "./request-class.ts";
import { defaultScorerConfig, RouteScorer } from "./scorer.ts";

/** A chain over two idle workers of model "m", in score mode without exploration. */
async function twoWorkers() {
  const config = loadConfig({ env: {} });
  const store = new MemoryRegistryStore();
  for (const id of ["w1", "w2"]) {
    await store.publish({ id, url: `http://127.0.0.1:1/${id}`, models: ["m"], state: "ready", inFlight: 0, queueDepth: 0, capacity: 8, device: "sim", layerRanges: [], prefixes: [], version: "1", startedAt: 1, updatedAt: 1 }, 60_000);
  }
  // Equal scores keep one order (no random tie-break): every ranking would pick the same worker.
  const scorer = new RouteScorer({ ...defaultScorerConfig(), epsilon: 0 }, { random: () => 0.5 });
  const directory = new WorkerDirectory(store, 60_000, silentLogger, scorer);
  await directory.refresh();
  const workerBackend = (w: { id: string }) => ({ kind: "worker", id: `worker:${w.id}`, workerId: w.id, model: "m", paid: false }) as unknown as Backend;
  return { chain: new BackendChain(config.routing, directory, workerBackend), scorer };
}

const chat = requestClass("/v1/chat/completions", { stream: true, messages: [{ role: "user", content: "hi" }] });
const firstOf = (r: { backends: Backend[] }) => r.backends[0]!.id;
const count = (ids: string[]) => ids.reduce<Record<string, number>>((m, id) => ({ ...m, [id]: (m[id] ?? 0) + 1 }), {});

describe("BackendChain", () => {
  it("keeps a bounded number of provider backends: made-up 'vendor/model' names cannot grow the router's memory", () => {
    const config = loadConfig({ env: {} });
    let made = 0;
    const provider = (model: string) => {
      made++;
      return { kind: "openrouter", id: `openrouter:${model}`, model, paid: true } as unknown as Backend;
    };
    const chain = new BackendChain(config.routing, new WorkerDirectory(new MemoryRegistryStore(), 1000, silentLogger), () => {
      throw new Error("no workers here");
    }, { openrouter: provider });
    for (let i = 0; i < 5000; i++) {
      const r = chain.resolve(`made-up/model-${i}`, "t");
      expect(r.backends.map((b) => b.id)).toEqual([`openrouter:made-up/model-${i}`]);
    }
    expect(chain.cachedProviders()).toBe(1024);
    // A name in steady use keeps its backend (same object, nothing new made).
    const hot = chain.resolve("vendor/hot", "t").backends[0];
    for (let i = 0; i < 2000; i++) {
      chain.resolve(`made-up/again-${i}`, "t");
      expect(chain.resolve("vendor/hot", "t").backends[0]).toBe(hot);
    }
    expect(made).toBe(5000 + 1 + 2000);
  });

  it("spreads requests ranked in one turn of the event loop (a burst admitted at once) instead of sending them all to the same best worker", async () => {
    const { chain } = await twoWorkers();
    // Nothing has begun an attempt yet: only the picks of this turn tell the rankings apart.
    const firsts = Array.from({ length: 16 }, () => firstOf(chain.resolve("m", "t", chat)));
    expect(count(firsts)).toEqual({ "worker:w1": 8, "worker:w2": 8 });
  });

  it("counts a pick until its attempt begins (then as the attempt), and no longer than the turn it was made in", async () => {
    const { chain, scorer } = await twoWorkers();
    const r = chain.resolve("m", "t", chat);
    const picked = firstOf(r);
    expect(scorer.picks(picked)).toBe(1);
    const end = r.observe(r.backends[0]!);
    expect(scorer.picks(picked)).toBe(0);
    expect(scorer.inFlight(picked)).toBe(1);
    end({ outcome: "ok", ttftMs: 5, durationMs: 10 });
    expect(scorer.inFlight(picked)).toBe(0);
    // A ranking whose request never reached an attempt (refused on the way) stops counting when the turn ends.
    const lost = firstOf(chain.resolve("m", "t", chat));
    expect(scorer.picks(lost)).toBe(1);
    await new Promise<void>((resolve) => setImmediate(resolve));
    expect(scorer.picks(lost)).toBe(0);
    // Lookups (no request class) pick nothing.
    chain.resolve("m", "t");
    expect(scorer.picks("worker:w1") + scorer.picks("worker:w2")).toBe(0);
  });
});
