// `switchyard bench <suite>`: benchmarks that print a table.
import { UsageError } from "../usage.ts";

export async function benchCommand(args: string[], flags: { quick?: boolean; levels?: string }): Promise<number> {
  const [suite] = args;
  if (suite === "router") {
    const { runRouterBench } = await import("../../../../bench/router.ts");
    const levels = flags.levels?.split(",").map((n) => Number(n.trim()));
    if (levels?.some((n) => !Number.isInteger(n))) throw new UsageError(`bench router: --levels takes stream counts like 1,100,1000`);
    return runRouterBench({ quick: flags.quick === true, levels });
  }
  if (suite === "engine") {
    const { runEngineBench } = await import("../../../../bench/engine.ts");
    return runEngineBench({ quick: flags.quick === true });
  }
  throw new UsageError(`bench: expected 'router' or 'engine', got '${suite ?? ""}'`);
}
