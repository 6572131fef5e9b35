export { createApp, createAdminApp, renderMetrics } from "./app.ts";
export { isRouterProcess, mergeMetrics, primaryAdminUrl, ROUTER_SEMI_SPACE_MB, routerExecArgv, serveToPrimary, superviseRouters } from "./processes.ts";
export { startRouter, type RouterHandle } from "./server.ts";
export { loadConfig, ConfigError, configSchema, redisTarget, type Config } from "./config.ts";
export * from "./errors.ts";
export { createLogger, silentLogger, type Logger } from "./observability/log.ts";
export { kernelListenOverflows } from "./observability/runtime.ts";
