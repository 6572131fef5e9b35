// `switchyard router`: one stateless router replica.
import { startRouter } from "@switchyard/router";
import { configFrom } from "../context.ts";
import { untilSignal } from "../signals.ts";

export async function routerCommand(flags: { config?: string }): Promise<number> {
  const config = configFrom(flags);
  const router = await startRouter(config);
  await untilSignal();
  await router.close();
  return 0;
}
