export { startAgent, type AgentHandle, type AgentOptions } from "./agent.ts";
export { checkAdvertiseUrl } from "./advertise.ts";
export { EngineClient, EngineError } from "./engine/client.ts";
export { ensureEngine, binaryPath, buildEngine } from "./engine/binary.ts";
export { resolveModel, defaultCacheDir } from "./models/fetch.ts";
export { catalog } from "./models/catalog.ts";
export { decodeSafetensors, tensorToFloats } from "./server/safetensors.ts";
export { FENCING_HEADER, FencingGuard } from "./server/fencing.ts";
export { parseWorkerConfig, WorkerConfigError, WorkerConfigSchema, type WorkerConfig, type WorkerConfigInput } from "./config.ts";
