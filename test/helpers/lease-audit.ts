// Reads a lease audit (lease_events) the way the contention and failover
// tests judge it: per worker, grants in time order must never overlap the
// previous grant's life (its release or expiry) and their fencing tokens must
// strictly increase.
import type { LeaseEvent } from "@switchyard/db";

export function auditLeaseGrants(events: LeaseEvent[], workerIds: readonly string[]): { granted: LeaseEvent[]; overlaps: number; inversions: number } {
  const granted = events.filter((e) => e.event === "granted");
  const endOf = new Map<string, number>();
  for (const e of events) {
    const t = e.event === "released" ? Math.min(e.at.getTime(), e.expiresAt.getTime()) : e.expiresAt.getTime();
    endOf.set(e.leaseId, Math.min(endOf.get(e.leaseId) ?? Infinity, t));
  }
  let overlaps = 0;
  let inversions = 0;
  for (const id of workerIds) {
    const mine = granted.filter((e) => e.worker === id).sort((a, b) => a.at.getTime() - b.at.getTime() || a.fencingToken - b.fencingToken);
    for (let k = 1; k < mine.length; k++) {
      if (mine[k]!.at.getTime() < endOf.get(mine[k - 1]!.leaseId)!) overlaps++;
      if (mine[k]!.fencingToken <= mine[k - 1]!.fencingToken) inversions++;
    }
  }
  return { granted, overlaps, inversions };
}
