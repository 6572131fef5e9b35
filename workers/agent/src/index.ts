export { startAgent, WORKER_LISTEN_BACKLOG, type AgentHandle, type AgentOptions, type ShardWire } from "./agent.ts";
export { checkAdvertiseUrl } from "./advertise.ts";
export { EngineClient, EngineError } from "./engine/client.ts";
export { ensureEngine, binaryPath, buildEngine } from "./engine/binary.ts";
export { resolveModel, defaultCacheDir } from "./models/fetch.ts";
export { catalog } from "./models/catalog.ts";
export { decodeSafetensors, tensorToFloats } from "./server/safetensors.ts";
export { FENCING_HEADER, FencingGuard } from "./server/fencing.ts";
export { parseWorkerConfig, WorkerConfigError, WorkerConfigSchema, type WorkerConfig, type WorkerConfigInput } from "./config.ts";
export { ggufBlockCount, ggufLayout, evenRanges, balancedRanges, type GgufLayout } from "./models/gguf.ts";
export { planModel, type ModelPlan } from "./engine/plan.ts";
// The shard link and its frame kinds: bench/split-probe.ts times each STEP round trip on it.
export { ShardLink } from "./shard/link.ts";
export { FrameKind } from "./shard/frame.ts";
