// `switchyard up`: the whole fabric on one machine — embedded PostgreSQL, the
// in-process registry, a router on 127.0.0.1:8080 and (once built) a local
// worker. First start creates tenant `local` and an API key, saved under the
// data directory so later starts reuse it.
import { existsSync } from "node:fs";
import { mkdir, readFile, writeFile } from "node:fs/promises";
import path from "node:path";
import { createKey, createTenant, findTenant, hashKey, lookupKeyByHash, type Db } from "@switchyard/db";
import { startRouter } from "@switchyard/router";
import { MemoryRegistryStore } from "@switchyard/state";
import { configFrom, openDb } from "../context.ts";
import { untilSignal } from "../signals.ts";

async function ensureLocalKey(db: Db, home: string): Promise<{ key: string; created: boolean }> {
  const keyFile = path.join(home, "api-key");
  if (existsSync(keyFile)) {
    const key = (await readFile(keyFile, "utf8")).trim();
    const owner = await lookupKeyByHash(db, hashKey(key));
    if (owner && !owner.revoked) return { key, created: false };
  }
  let tenant = await findTenant(db, "local");
  if (!tenant) {
    const r = await createTenant(db, "local");
    if (!r.ok) throw new Error("could not create tenant 'local'");
    tenant = r.tenant;
  }
  const { key } = await createKey(db, tenant.id, "up");
  await writeFile(keyFile, key + "\n", { mode: 0o600 });
  return { key, created: true };
}

export async function upCommand(flags: { config?: string }): Promise<number> {
  const config = configFrom(flags);
  await mkdir(config.home, { recursive: true });
  const step = (msg: string) => process.stderr.write(`» ${msg}\n`);
  step(`starting embedded PostgreSQL in ${path.resolve(config.home, "pg")}`);
  const db = await openDb(config, { migrate: true, quiet: true });
  step("database migrated");
  const { key, created } = await ensureLocalKey(db.db, config.home);
  const registry = new MemoryRegistryStore();
  const router = await startRouter(config, { registry, db });
  const workers = await registry.list();
  process.stderr.write(
    [
      "",
      `Switchyard is up: ${router.url}  (metrics: ${router.adminUrl}/metrics)`,
      `API key for tenant 'local'${created ? " (new)" : ""}: ${key}`,
      `  saved in ${path.resolve(config.home, "api-key")}`,
      workers.length === 0
        ? "No worker is registered: the local worker arrives with the engine; until then /v1/models is empty and inference answers 404/503."
        : `${workers.length} worker(s) registered.`,
      `Try: curl -s ${router.url}/v1/models -H "Authorization: Bearer ${key}"`,
      "",
    ].join("\n"),
  );
  const sig = await untilSignal();
  step(`${sig}: shutting down`);
  await router.close();
  await db.close();
  await db.stopEmbedded();
  return 0;
}
