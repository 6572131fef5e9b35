// Worker invites, durable: what `switchyard workers invite` granted (the
// models routers route the worker for, and its Redis ACL user's password as
// a SHA-256), and what `workers revoke` took back. Redis holds the live copy
// — the invite key routers read and the ACL user the worker heartbeats with —
// and loses it: ACL users are not in RDB or AOF files, so every Redis restart
// drops them, and a Redis back empty drops the invite keys too. Routers put
// both back from these rows (apps/router/src/routing/invite-keeper.ts).
import { pgTable, primaryKey, text } from "drizzle-orm/pg-core";
import { createdAt, tstz } from "./columns.ts";

export const workerInvites = pgTable(
  "worker_invites",
  {
    /** The Redis key prefix (redis.keyPrefix) the invite was made under: its ACL user may write only that prefix's key. */
    keyPrefix: text("key_prefix").notNull(),
    workerId: text("worker_id").notNull(),
    /** The models routers route this worker for, whatever it advertises. */
    models: text("models").array().notNull(),
    /** SHA-256 (hex) of the worker's Redis password: ACL SETUSER takes it as `#<hex>`, so the user is made again without the password. '' on a tombstone. */
    passwordSha256: text("password_sha256").notNull(),
    createdAt: createdAt(),
    /** Set by `workers revoke`: the row stays as a tombstone, so no router brings the user back. */
    revokedAt: tstz("revoked_at"),
  },
  (t) => [primaryKey({ columns: [t.keyPrefix, t.workerId] })],
);

export type WorkerInviteRow = typeof workerInvites.$inferSelect;
