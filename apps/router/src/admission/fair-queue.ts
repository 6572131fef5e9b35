// One band's waiting room on one pool: a FIFO per tenant. `shiftFairest`
// serves the tenant a rank puts first (the gate ranks by slots held per unit
// of weight: the tenant furthest below its fair share), ties in ring order —
// so equal tenants take turns and a tenant with a thousand waiting requests
// gets one turn per round, like everyone else. Removal is O(1), so a
// cancelled request leaves at once wherever it stands.
export interface QueueEntry {
  readonly tenant: string;
}

export class FairQueue<T extends QueueEntry> {
  /** tenant → its waiting entries in arrival order; Map order is the round-robin ring. */
  private readonly byTenant = new Map<string, Set<T>>();
  private count = 0;

  get size(): number {
    return this.count;
  }

  /** How many entries this tenant has waiting. */
  countOf(tenant: string): number {
    return this.byTenant.get(tenant)?.size ?? 0;
  }

  push(entry: T): void {
    let fifo = this.byTenant.get(entry.tenant);
    if (!fifo) {
      fifo = new Set();
      this.byTenant.set(entry.tenant, fifo); // joins the ring at the end
    }
    fifo.add(entry);
    this.count++;
  }

  /** The next entry in plain round-robin: the oldest of the tenant whose turn it is. */
  shift(): T | undefined {
    return this.shiftFairest(() => 0);
  }

  /**
   * The oldest entry of the waiting tenant with the lowest rank (the first
   * in the ring among equals); that tenant moves to the ring's end. O(tenants waiting).
   */
  shiftFairest(rank: (tenant: string) => number): T | undefined {
    let best: string | undefined;
    let bestRank = Infinity;
    for (const tenant of this.byTenant.keys()) {
      const r = rank(tenant);
      if (best === undefined || r < bestRank) {
        best = tenant;
        bestRank = r;
      }
    }
    if (best === undefined) return undefined;
    const fifo = this.byTenant.get(best)!;
    const entry = fifo.values().next().value as T;
    fifo.delete(entry);
    this.count--;
    this.byTenant.delete(best);
    if (fifo.size > 0) this.byTenant.set(best, fifo);
    return entry;
  }

  /** Takes an entry out wherever it stands; false if it was not waiting. */
  remove(entry: T): boolean {
    const fifo = this.byTenant.get(entry.tenant);
    if (!fifo?.delete(entry)) return false;
    this.count--;
    if (fifo.size === 0) this.byTenant.delete(entry.tenant);
    return true;
  }

  /** Waiting entries per tenant (metrics, tests). */
  tenants(): Map<string, number> {
    return new Map([...this.byTenant].map(([t, f]) => [t, f.size]));
  }
}
