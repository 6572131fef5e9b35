import { MemoryRegistryStore } from "@switchyard/state";
import { describe, expect, it } from "vitest";
import type { Backend } from "../backends/types.ts";
import { loadConfig } from "../config.ts";
import { silentLogger } from "../observability/log.ts";
import { BackendChain } from "./chain.ts";
import { WorkerDirectory } from "./directory.ts";

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
});
