// `switchyard keys create|list|revoke`. The full key is printed once, at
// creation; only its hash is stored.
import { createKey, findTenant, listKeys, revokeKey } from "@switchyard/db";
import { configFrom, openDb } from "../context.ts";
import { UsageError } from "../usage.ts";

export async function keysCommand(args: string[], flags: { config?: string; tenant?: string; name?: string }): Promise<number> {
  const [verb, arg, ...rest] = args;
  if (verb !== "create" && verb !== "list" && verb !== "revoke") {
    throw new UsageError(`keys: expected 'create --tenant NAME', 'list --tenant NAME' or 'revoke PREFIX', got '${verb ?? ""}'`);
  }
  if (rest.length > 0) throw new UsageError(`keys ${verb}: unexpected argument '${rest[0]}'`);
  if ((verb === "create" || verb === "list") && !flags.tenant) throw new UsageError(`keys ${verb}: --tenant NAME is required`);
  if ((verb === "create" || verb === "list") && arg) throw new UsageError(`keys ${verb}: unexpected argument '${arg}'`);
  if (verb === "revoke" && !arg) throw new UsageError("keys revoke: missing PREFIX (the sy_xxxxxxxx shown by 'keys list')");
  if (verb !== "create" && flags.name !== undefined) throw new UsageError(`keys ${verb}: --name goes with 'keys create'`);
  const db = await openDb(configFrom(flags), { migrate: true, quiet: true });
  try {
    if (verb === "revoke") {
      // With --tenant, only that tenant's key: a prefix copied from another tenant's list is refused, not revoked.
      const owner = flags.tenant === undefined ? undefined : await findTenant(db.db, flags.tenant);
      if (flags.tenant !== undefined && !owner) {
        process.stderr.write(`error: no tenant named '${flags.tenant}' (see 'switchyard tenants list')\n`);
        return 1;
      }
      const r = await revokeKey(db.db, arg!, owner?.id);
      if (r === "not_found") {
        process.stderr.write(`error: no key with prefix '${arg}'${owner ? ` for tenant ${owner.name}` : ""}\n`);
        return 1;
      }
      process.stdout.write(r === "revoked" ? `revoked ${arg}\n` : `${arg} was already revoked\n`);
      return 0;
    }
    const tenant = await findTenant(db.db, flags.tenant!);
    if (!tenant) {
      process.stderr.write(`error: no tenant named '${flags.tenant}' (see 'switchyard tenants list')\n`);
      return 1;
    }
    if (verb === "create") {
      const { key, row } = await createKey(db.db, tenant.id, flags.name);
      process.stdout.write(`${key}\n`);
      process.stderr.write(`created key ${row.prefix} for tenant ${tenant.name}; it is shown only this once\n`);
      return 0;
    }
    const rows = await listKeys(db.db, tenant.id);
    const fmt = (d: Date | null) => (d ? d.toISOString() : "-");
    process.stdout.write(
      [`${"PREFIX".padEnd(12)} ${"NAME".padEnd(16)} ${"STATUS".padEnd(8)} ${"CREATED".padEnd(24)} LAST USED`]
        .concat(rows.map((k) => `${k.prefix.padEnd(12)} ${(k.name ?? "-").padEnd(16)} ${(k.revokedAt ? "revoked" : "active").padEnd(8)} ${fmt(k.createdAt).padEnd(24)} ${fmt(k.lastUsedAt)}`))
        .join("\n") + "\n",
    );
    return 0;
  } finally {
    await db.close();
    await db.stopEmbedded();
  }
}
