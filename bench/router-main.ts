// A router in its own process for benchmarks (real Redis registry and
// Postgres from env), so its CPU can be measured apart from the load.
import { loadConfig, startRouter } from "@switchyard/router";

const config = loadConfig({ env: process.env, overrides: { "log.level": "error" } });
const router = await startRouter(config);
process.stdout.write(`listening ${router.url}\n`);
process.on("SIGTERM", () => void router.close().then(() => process.exit(0)));
