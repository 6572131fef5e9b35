// The head shard's pipelines: a path is one chosen replica per stage of a
// router's route (registry/shard-route.ts), reached over one persistent
// connection to the first of them, which connects onward along the same
// choice. Connections are kept per path and reused by every sequence on it;
// one idle for a minute is closed. Choosing skips the replicas a sequence has
// lost, and prefers ones nobody lost lately.
import { legOf, type ShardHop, type ShardRoute } from "@switchyard/state";
import { LazyShardLink, ShardLink, type ShardExpectation } from "./link.ts";

export interface PipelinePath {
  /** The chosen replicas (ids and URLs), in stage order: equal keys share a connection. */
  readonly key: string;
  /** Worker ids of the chosen replicas, in stage order. */
  readonly hops: readonly string[];
  link(): Promise<ShardLink>;
  /** Its connection if it is still kept (closing a sequence never reconnects a retired path). */
  existing(): Promise<ShardLink | undefined>;
  /** A step went over its connection: in use, not idle (the sweep closes connections idle for a minute). */
  touch(): void;
}

/** The one path of a static `--next` pipeline. */
export function staticPath(next: LazyShardLink): PipelinePath {
  return { key: `static ${next.peer.url}`, hops: [next.peer.url], link: () => next.get(), existing: () => next.existing(), touch: () => {} };
}

/** How long a lost replica is passed over by new sequences when another serves its stage. */
const LOST_MEMORY_MS = 30_000;
const IDLE_CLOSE_MS = 60_000;

export class ShardPaths {
  private readonly links = new Map<string, { link: LazyShardLink; usedAt: number }>();
  private readonly lost = new Map<string, number>();
  private readonly sweeper: NodeJS.Timeout;

  constructor(
    private readonly expect: () => ShardExpectation | undefined,
    /** The keepalive asked of the first shard of each path (ms; 0: none). */
    private readonly keepaliveMs?: number,
  ) {
    this.sweeper = setInterval(() => this.sweep(), 10_000);
    this.sweeper.unref();
  }

  /** A replica this shard could not reach: new sequences prefer its peers for a while. */
  noteLost(workerId: string): void {
    this.lost.set(workerId, Date.now());
  }

  private lostLately(id: string): boolean {
    const at = this.lost.get(id);
    return at !== undefined && Date.now() - at < LOST_MEMORY_MS;
  }

  /** A path through `route` avoiding `avoid`; undefined when some stage has no replica left. */
  choose(route: ShardRoute, avoid: ReadonlySet<string>): PipelinePath | undefined {
    const chosen: ShardHop[] = [];
    for (const stage of route.stages) {
      const left = stage.hops.filter((h) => !avoid.has(h.id));
      const pick = left.find((h) => !this.lostLately(h.id)) ?? left[0];
      if (!pick) return undefined;
      chosen.push(pick);
    }
    const key = `${route.model}\u0000${route.digest}\u0000${chosen.map((h) => `${h.id}@${h.url}`).join(">")}`;
    const hops = chosen.map((h) => h.id);
    return {
      key,
      hops,
      link: () => {
        let entry = this.links.get(key);
        if (!entry) {
          const first = chosen[0]!;
          // This route's tickets open the connection; later sequences on the same replicas reuse it.
          const peer = { url: first.url, id: first.id, routed: { ticket: first.ticket, leg: legOf(route, 0), path: hops.slice(1) } };
          entry = { link: new LazyShardLink(peer, this.expect, this.keepaliveMs), usedAt: Date.now() };
          this.links.set(key, entry);
        }
        entry.usedAt = Date.now();
        return entry.link.get();
      },
      existing: async () => {
        return this.links.get(key)?.link.existing();
      },
      touch: () => {
        const entry = this.links.get(key);
        if (entry) entry.usedAt = Date.now();
      },
    };
  }

  /**
   * Drops a path's connection (`lost`, one of its replicas, is gone): new
   * sequences make a new one. `link`: the connection the loss was found on —
   * the path's entry is dropped only while it still holds that one (a newer
   * connection for the same replicas is not someone else's loss). Retiring
   * never connects: a connection not open is not opened to be closed.
   */
  retire(key: string, lost: string, link?: ShardLink): void {
    const entry = this.links.get(key);
    if (link) link.retire(lost);
    if (!entry || (link && !entry.link.holds(link))) return;
    this.links.delete(key);
    if (!link) void entry.link.existing().then((l) => l?.retire(lost), () => {});
  }

  private sweep(): void {
    const now = Date.now();
    for (const [key, e] of this.links) {
      if (now - e.usedAt > IDLE_CLOSE_MS) {
        this.links.delete(key);
        void e.link.close();
      }
    }
    for (const [id, at] of this.lost) if (now - at > LOST_MEMORY_MS) this.lost.delete(id);
  }

  async close(): Promise<void> {
    clearInterval(this.sweeper);
    await Promise.all([...this.links.values()].map((e) => e.link.close()));
    this.links.clear();
  }
}
