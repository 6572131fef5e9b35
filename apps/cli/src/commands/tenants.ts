// `switchyard tenants create|list`.
import { createTenant, listTenants } from "@switchyard/db";
import { configFrom, openDb } from "../context.ts";
import { UsageError } from "../usage.ts";

export async function tenantsCommand(args: string[], flags: { config?: string }): Promise<number> {
  const [verb, name, ...rest] = args;
  if (verb !== "create" && verb !== "list") throw new UsageError(`tenants: expected 'create NAME' or 'list', got '${verb ?? ""}'`);
  if (verb === "create" && !name) throw new UsageError("tenants create: missing NAME");
  if (rest.length > 0 || (verb === "list" && name)) throw new UsageError(`tenants ${verb}: unexpected argument '${verb === "list" ? name : rest[0]}'`);
  const db = await openDb(configFrom(flags), { migrate: true, quiet: true });
  try {
    if (verb === "create") {
      const r = await createTenant(db.db, name!);
      if (!r.ok) {
        process.stderr.write(
          r.reason === "exists"
            ? `error: tenant '${name}' already exists\n`
            : `error: invalid tenant name '${name}': use lowercase letters, digits, '-' or '_' (max 63)\n`,
        );
        return 1;
      }
      process.stdout.write(`created tenant ${r.tenant.name} (id ${r.tenant.id})\n`);
      return 0;
    }
    const rows = await listTenants(db.db);
    const lines = rows.map((r) => `${r.name.padEnd(24)} ${String(r.id).padStart(6)} ${String(r.activeKeys).padStart(11)}  ${r.createdAt.toISOString()}`);
    process.stdout.write([`${"NAME".padEnd(24)} ${"ID".padStart(6)} ${"ACTIVE KEYS".padStart(11)}  CREATED`, ...lines].join("\n") + "\n");
    return 0;
  } finally {
    await db.close();
    await db.stopEmbedded();
  }
}
