// `switchyard migrate`: apply committed migrations.
import { runMigrations } from "@switchyard/db";
import { configFrom, openDb } from "../context.ts";

export async function migrateCommand(flags: { config?: string }): Promise<number> {
  const config = configFrom(flags);
  const db = await openDb(config);
  try {
    await runMigrations(db.url);
    process.stdout.write("migrations applied\n");
    return 0;
  } finally {
    await db.close();
    await db.stopEmbedded();
  }
}
