// `switchyard limits set|show|clear|list`: rate limits per tenant and per API
// key — requests and tokens per minute (rateLimits.windowMs on the routers),
// counted in Redis by every router together (docs/LIMITS.md).
import { clearRateLimit, findTenant, listKeys, listRateLimits, setRateLimit, tenantRateLimits, type Db } from "@switchyard/db";
import { MAX_RATE_REQUESTS, MAX_RATE_TOKENS } from "@switchyard/state";
import { configFrom, openDb } from "../context.ts";
import { UsageError } from "../usage.ts";

export interface LimitsFlags {
  config?: string;
  rpm?: string;
  tpm?: string;
  key?: string;
}

type Verb = "set" | "show" | "clear" | "list";
const verbs: readonly Verb[] = ["set", "show", "clear", "list"];

/** "N" → N (1..max), "none" → null (unlimited); anything else is refused before a database is opened. */
export function parseLimit(flag: "rpm" | "tpm", text: string): number | null {
  const max = flag === "rpm" ? MAX_RATE_REQUESTS : MAX_RATE_TOKENS;
  const t = text.trim();
  if (t === "none") return null;
  if (!/^\d+$/.test(t)) throw new UsageError(`limits set: --${flag} takes a whole number from 1 to ${max}, or 'none' (got '${text}')`);
  const n = Number(t);
  if (n < 1) throw new UsageError(`limits set: --${flag} must be at least 1 (to stop a key, revoke it: 'switchyard keys revoke PREFIX')`);
  if (n > max) throw new UsageError(`limits set: --${flag} ${text} is beyond what a limit can be (at most ${max})`);
  return n;
}

export async function limitsCommand(args: string[], flags: LimitsFlags): Promise<number> {
  const [verb, name, ...rest] = args as [Verb | undefined, string | undefined, ...string[]];
  if (!verb || !verbs.includes(verb)) throw new UsageError(`limits: expected set, show, clear or list, got '${verb ?? ""}'`);
  if (rest.length > 0) throw new UsageError(`limits ${verb}: unexpected argument '${rest[0]}'`);
  if (verb === "list" && name) throw new UsageError(`limits list: unexpected argument '${name}'`);
  if (verb !== "list" && !name) throw new UsageError(`limits ${verb}: missing tenant NAME`);
  if (verb !== "set" && (flags.rpm !== undefined || flags.tpm !== undefined)) throw new UsageError(`limits ${verb}: --rpm/--tpm are for 'limits set'`);
  if ((verb === "show" || verb === "list") && flags.key !== undefined) throw new UsageError(`limits ${verb}: --key does not apply here`);
  if (flags.key !== undefined && !/^sy_[0-9a-f]{8}$/.test(flags.key)) throw new UsageError(`limits ${verb}: --key takes a key's visible prefix, sy_ and 8 hex digits (got '${flags.key}')`);
  let rpm: number | null | undefined;
  let tpm: number | null | undefined;
  if (verb === "set") {
    if (flags.rpm === undefined && flags.tpm === undefined) throw new UsageError("limits set: give --rpm N, --tpm N or both");
    if (flags.rpm !== undefined) rpm = parseLimit("rpm", flags.rpm);
    if (flags.tpm !== undefined) tpm = parseLimit("tpm", flags.tpm);
  }
  const db = await openDb(configFrom(flags), { migrate: true, quiet: true });
  try {
    if (verb === "list") return await list(db.db);
    const tenant = await findTenant(db.db, name!);
    if (!tenant) {
      process.stderr.write(`error: no tenant named '${name}' (see 'switchyard tenants list')\n`);
      return 1;
    }
    const what = flags.key ? `key ${flags.key} of ${tenant.name}` : tenant.name;
    const key = flags.key && verb === "set" ? (await listKeys(db.db, tenant.id)).find((k) => k.prefix === flags.key) : undefined;
    if (flags.key && verb === "set" && key?.revokedAt) {
      process.stderr.write(`error: key ${flags.key} of ${tenant.name} is revoked: it serves nothing a limit could bound\n`);
      return 1;
    }
    if (flags.key && verb === "set" && !key) {
      process.stderr.write(`error: tenant '${tenant.name}' has no key ${flags.key} (see 'switchyard keys list --tenant ${tenant.name}')\n`);
      return 1;
    }
    if (verb === "set") {
      const row = await setRateLimit(db.db, { tenantId: tenant.id, keyPrefix: flags.key ?? "", ...(rpm !== undefined ? { requestsPerMinute: rpm } : {}), ...(tpm !== undefined ? { tokensPerMinute: tpm } : {}) });
      process.stdout.write(`rate limit of ${what}: ${text(row.requestsPerMinute, "requests")}, ${text(row.tokensPerMinute, "tokens")} per minute\n`);
      return 0;
    }
    if (verb === "clear") {
      if (!(await clearRateLimit(db.db, tenant.id, flags.key ?? ""))) {
        process.stderr.write(`error: ${what} has no rate limit\n`);
        return 1;
      }
      process.stdout.write(`cleared the rate limit of ${what}\n`);
      return 0;
    }
    const rows = await tenantRateLimits(db.db, tenant.id);
    if (rows.length === 0) {
      process.stdout.write(`${tenant.name} has no rate limits\n`);
      return 0;
    }
    table(rows.map((r) => [r.keyPrefix || "(tenant)", num(r.requestsPerMinute), num(r.tokensPerMinute), r.updatedAt.toISOString()]), ["SCOPE", "RPM", "TPM", "UPDATED"]);
    return 0;
  } finally {
    await db.close();
    await db.stopEmbedded();
  }
}

async function list(db: Db): Promise<number> {
  const rows = await listRateLimits(db);
  table(rows.map((r) => [r.tenantName, r.keyPrefix || "(tenant)", num(r.requestsPerMinute), num(r.tokensPerMinute), r.updatedAt.toISOString()]), ["TENANT", "SCOPE", "RPM", "TPM", "UPDATED"]);
  if (rows.length === 0) process.stderr.write("no rate limits set\n");
  return 0;
}

const num = (n: number | null) => (n === null ? "-" : String(n));
const text = (n: number | null, what: string) => (n === null ? `unlimited ${what}` : `${n} ${what}`);

function table(lines: string[][], header: string[]): void {
  const widths = header.map((h, i) => Math.max(h.length, ...lines.map((l) => l[i]!.length)));
  const fmt = (l: string[]) => l.map((c, i) => c.padEnd(widths[i]!)).join("  ").trimEnd();
  process.stdout.write([fmt(header), ...lines.map(fmt)].join("\n") + "\n");
}
