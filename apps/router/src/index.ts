export { createApp, createAdminApp } from "./app.ts";
export { startRouter, type RouterHandle } from "./server.ts";
export { loadConfig, ConfigError, configSchema, redisTarget, type Config } from "./config.ts";
export * from "./errors.ts";
export { createLogger, silentLogger, type Logger } from "./observability/log.ts";
