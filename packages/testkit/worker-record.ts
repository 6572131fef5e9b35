// A whole, valid worker record to publish or route to: the registry contract
// and the tests of what reads the registry start from it, changing what
// they test.
import type { WorkerRecord } from "@switchyard/state";

export function workerRecord(id: string, over: Partial<WorkerRecord> = {}): WorkerRecord {
  return {
    id,
    url: `http://127.0.0.1:9${id.length}00`,
    models: ["m1"],
    state: "ready",
    inFlight: 0,
    queueDepth: 0,
    capacity: 8,
    device: "cpu",
    layerRanges: [],
    prefixes: [],
    version: "1",
    startedAt: 1,
    updatedAt: 2,
    ...over,
  };
}
