// Redis connection factory shared by router and agent.
import { Redis } from "ioredis";

export function connectRedis(url: string, opts: { lazy?: boolean; readyCheck?: boolean; autoPipelining?: boolean } = {}): Redis {
  return new Redis(url, {
    // Commands issued in the same tick leave in one write: a router under
    // load sends each request's XADD, holds and settles as batches, not as
    // one syscall each.
    enableAutoPipelining: opts.autoPipelining ?? false,
    lazyConnect: opts.lazy ?? false,
    // A worker's ACL user may not run INFO, which the ready check uses.
    enableReadyCheck: opts.readyCheck ?? true,
    // Fail commands fast while disconnected instead of queueing forever.
    maxRetriesPerRequest: 2,
    enableOfflineQueue: true,
    connectTimeout: 2000,
  });
}
