export async function runRouterBench(_opts: { quick: boolean }): Promise<number> {
  throw new Error("router bench: in progress");
}
