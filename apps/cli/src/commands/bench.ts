// `switchyard bench <suite>`: benchmarks that print a table.
import { UsageError } from "../usage.ts";

export async function benchCommand(args: string[], flags: { quick?: boolean }): Promise<number> {
  const [suite] = args;
  if (suite === "router") {
    const { runRouterBench } = await import("../../../../bench/router.ts");
    return runRouterBench({ quick: flags.quick === true });
  }
  if (suite === "engine") {
    const { runEngineBench } = await import("../../../../bench/engine.ts");
    return runEngineBench({ quick: flags.quick === true });
  }
  throw new UsageError(`bench: expected 'router' or 'engine', got '${suite ?? ""}'`);
}
