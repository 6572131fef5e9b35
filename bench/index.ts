// The benches' one entry point for `switchyard bench <suite>`: each suite is
// loaded on demand, so running one never loads the others.
export { STREAM_LEVELS } from "./lib/levels.ts";
export const benches = {
  router: async (opts: import("./router.ts").RouterBenchOptions) => (await import("./router.ts")).runRouterBench(opts),
  routerAgainst: async (opts: import("./router-against.ts").AgainstOptions) => (await import("./router-against.ts")).runRouterAgainst(opts),
  admission: async (opts: { quick: boolean }) => (await import("./admission.ts")).runAdmissionBench(opts),
  routing: async (opts: { quick: boolean }) => (await import("./routing.ts")).runRoutingBench(opts),
  registry: async (opts: { quick: boolean }) => (await import("./registry.ts")).runRegistryBench(opts),
  engine: async (opts: { quick: boolean; model?: string; reference?: import("./engine.ts").ReferenceChoice }) => (await import("./engine.ts")).runEngineBench(opts),
  split: async (opts: { quick: boolean; levels?: number[]; threads?: number; cut?: "balanced" | "even" }) => (await import("./split.ts")).runSplitBench(opts),
};
