// The lease object every /v1/leases route answers with. Times are Unix
// seconds with a millisecond fraction (leases can be shorter than a second).
import * as z from "zod";
import type { LeaseView } from "../../../leases/service.ts";

/** The lease object as documented (openapi): the shape leaseJson answers with. */
export const leaseAnswer = z.object({
  id: z.string(),
  object: z.literal("lease"),
  worker: z.string(),
  fencing_token: z.number().int(),
  status: z.enum(["active", "released", "expired"]),
  granted_at: z.number(),
  expires_at: z.number(),
  ended_at: z.number().nullable(),
});

export interface LeaseJson {
  id: string;
  object: "lease";
  worker: string;
  fencing_token: number;
  status: LeaseView["status"];
  granted_at: number;
  expires_at: number;
  ended_at: number | null;
}

const seconds = (ms: number) => ms / 1000;

export function leaseJson(v: LeaseView): LeaseJson {
  return {
    id: v.lease.id,
    object: "lease",
    worker: v.lease.workerId,
    fencing_token: v.lease.fencingToken,
    status: v.status,
    granted_at: seconds(v.lease.grantedAtMs),
    expires_at: seconds(v.lease.expiresAtMs),
    ended_at: v.endedAtMs === undefined ? null : seconds(v.endedAtMs),
  };
}
