// `switchyard bench <suite>`: benchmarks that print a table.
import { UsageError } from "../usage.ts";

export async function benchCommand(args: string[], flags: { quick?: boolean; levels?: string; only?: string }): Promise<number> {
  const [suite] = args;
  if (suite === "router") {
    const { runRouterBench } = await import("../../../../bench/router.ts");
    const levels = flags.levels?.split(",").map((n) => Number(n.trim()));
    if (levels?.some((n) => !Number.isInteger(n))) throw new UsageError(`bench router: --levels takes stream counts like 1,100,1000`);
    if (flags.only !== undefined && flags.only !== "money") throw new UsageError(`bench router: --only takes 'money', got '${flags.only}'`);
    return runRouterBench({ quick: flags.quick === true, levels, only: flags.only });
  }
  if (suite === "admission") {
    const { runAdmissionBench } = await import("../../../../bench/admission.ts");
    return runAdmissionBench({ quick: flags.quick === true });
  }
  if (suite === "routing") {
    const { runRoutingBench } = await import("../../../../bench/routing.ts");
    return runRoutingBench({ quick: flags.quick === true });
  }
  if (suite === "engine") {
    const { runEngineBench } = await import("../../../../bench/engine.ts");
    return runEngineBench({ quick: flags.quick === true });
  }
  throw new UsageError(`bench: expected 'router', 'engine', 'admission' or 'routing', got '${suite ?? ""}'`);
}
