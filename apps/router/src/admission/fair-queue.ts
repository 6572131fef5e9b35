// One band's waiting room on one pool: a FIFO per tenant, tenants served
// round-robin (a tenant with a thousand waiting requests takes one turn per
// round, like everyone else). Removal is O(1), so a cancelled request leaves
// at once wherever it stands.
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

  push(entry: T): void {
    let fifo = this.byTenant.get(entry.tenant);
    if (!fifo) {
      fifo = new Set();
      this.byTenant.set(entry.tenant, fifo); // joins the ring at the end
    }
    fifo.add(entry);
    this.count++;
  }

  /** The next entry: the oldest of the tenant whose turn it is; that tenant moves to the ring's end. */
  shift(): T | undefined {
    const next = this.byTenant.entries().next();
    if (next.done) return undefined;
    const [tenant, fifo] = next.value;
    const entry = fifo.values().next().value as T;
    fifo.delete(entry);
    this.count--;
    this.byTenant.delete(tenant);
    if (fifo.size > 0) this.byTenant.set(tenant, fifo);
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
