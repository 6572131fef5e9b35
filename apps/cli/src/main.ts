// Command dispatch for `switchyard`. Bad arguments print a clear message and
// exit 2; failures exit 1.
import { parseArgs } from "node:util";
import { ConfigError } from "@switchyard/router/config";
import { UsageError, usage } from "./usage.ts";

/**
 * The flags each command reads, besides --config and --help. The parser
 * knows every command's flags at once; one given to a command that does not
 * read it is refused, never ignored (`keys revoke P --tenant T` revoked P
 * whatever tenant it was; `up --port` served on the configured port).
 */
const commandFlags: Record<string, readonly string[]> = {
  up: ["model", "device", "no-worker", "split", "processes"],
  router: ["embedded", "processes"],
  worker: ["redis", "model", "advertise", "token", "id", "port", "host", "device", "key-prefix", "max-batch", "max-seq-len", "memory-budget-mb", "engine", "engine-stall-ms", "fencing-key", "fencing-state", "layers", "next", "next-token", "shard-keepalive"],
  spend: ["from", "to", "tenant", "by", "format"],
  workers: ["model", "advertise"],
  db: [],
  migrate: [],
  tenants: [],
  keys: ["tenant", "name"],
  budgets: ["redis", "key-prefix", "daily-cents", "daily-usd", "time-zone", "alerts", "day"],
  limits: ["rpm", "tpm", "key"],
  prices: ["input", "output", "cached-input", "cache-write", "cache-write-1h", "audio-input", "image-token-multiplier", "long-context-over", "long-input", "long-output", "long-cached-input", "long-cache-write", "long-cache-write-1h", "effective-from", "backend", "model"],
  ledger: ["keep-months", "archive-dir", "months-ahead", "drop"],
};

/** …and each bench suite's own (a flag another suite reads would start a long run without it). */
const benchFlags: Record<string, readonly string[]> = {
  router: ["quick", "levels", "only", "cluster", "processes", "profile", "against", "rounds", "warm", "rate-limits", "rate", "against-node-flags", "against-env", "body-kb"],
  engine: ["quick", "model", "reference"],
  split: ["quick", "levels", "threads", "cut"],
  admission: ["quick"],
  routing: ["quick"],
  registry: ["quick"],
};
// `bench` with an unknown suite: any suite's flag (the bench command names the suites it has).
commandFlags.bench = [...new Set(Object.values(benchFlags).flat())];

/** Commands whose whole command line is flags: a word after them is a mistake (a second model without its --model, a config file without --config). */
const takesNoArguments = new Set(["up", "router", "worker", "spend", "migrate"]);

/** Where a setting a command does not take as a flag is set instead. */
const settingHints: Record<string, string> = {
  port: " (the router's port is router.port: --config FILE or SWITCHYARD_ROUTER__PORT)",
  host: " (the router's address is router.host: --config FILE or SWITCHYARD_ROUTER__HOST)",
  redis: " (redis.url: --config FILE or REDIS_URL)",
};

function checkCommandLine(command: string, rest: string[], values: Record<string, unknown>): void {
  const suite = command === "bench" && rest[0] !== undefined && Object.hasOwn(benchFlags, rest[0]) ? rest[0] : undefined;
  const allowed = suite ? benchFlags[suite] : Object.hasOwn(commandFlags, command) ? commandFlags[command] : undefined;
  const name = suite ? `bench ${suite}` : command;
  if (!allowed) return; // an unknown command: the switch below says so
  for (const flag of Object.keys(values)) {
    if (flag === "config" || flag === "help" || allowed.includes(flag)) continue;
    throw new UsageError(`--${flag} does not apply to '${name}'${settingHints[flag] ?? ""}`);
  }
  if (takesNoArguments.has(command) && rest.length > 0) {
    throw new UsageError(`'${command}' takes no arguments, got '${rest[0]}'${command === "up" || command === "worker" ? " (one --model per model)" : command === "router" ? " (a config file goes after --config)" : ""}`);
  }
  if (command === "bench" && rest.length > 1) throw new UsageError(`bench ${rest[0]}: unexpected argument '${rest[1]}'`);
}

export async function main(argv: string[]): Promise<number> {
  try {
    // psql's own flags (-c, -At, …) pass through untouched: only a leading --config is ours.
    if (argv[0] === "psql") {
      const rest = argv.slice(1);
      const config = rest[0] === "--config" ? rest[1] : undefined;
      if (rest[0] === "--config" && config === undefined) throw new UsageError("psql: --config needs a file");
      return await (await import("./commands/db.ts")).psqlCommand(config === undefined ? rest : rest.slice(2), { config });
    }
    const { values, positionals } = parseArgs({
      args: argv,
      allowPositionals: true,
      strict: true,
      options: {
        config: { type: "string" },
        tenant: { type: "string" },
        name: { type: "string" },
        quick: { type: "boolean" },
        levels: { type: "string" },
        threads: { type: "string" },
        cut: { type: "string" },
        only: { type: "string" },
        cluster: { type: "string" },
        from: { type: "string" },
        to: { type: "string" },
        by: { type: "string" },
        format: { type: "string" },
        redis: { type: "string" },
        model: { type: "string", multiple: true },
        advertise: { type: "string" },
        token: { type: "string" },
        id: { type: "string" },
        port: { type: "string" },
        host: { type: "string" },
        device: { type: "string" },
        "key-prefix": { type: "string" },
        "max-batch": { type: "string" },
        "max-seq-len": { type: "string" },
        "memory-budget-mb": { type: "string" },
        engine: { type: "string" },
        "engine-stall-ms": { type: "string" },
        "no-worker": { type: "boolean" },
        "fencing-key": { type: "string" },
        "fencing-state": { type: "string" },
        layers: { type: "string" },
        split: { type: "string" },
        next: { type: "string" },
        "next-token": { type: "string" },
        "shard-keepalive": { type: "string" },
        embedded: { type: "boolean" },
        processes: { type: "string" },
        profile: { type: "string" },
        against: { type: "string" },
        rounds: { type: "string" },
        warm: { type: "string" },
        "rate-limits": { type: "boolean" },
        rate: { type: "string" },
        "against-node-flags": { type: "string" },
        "against-env": { type: "string" },
        "body-kb": { type: "string" },
        reference: { type: "string" },
        // budgets, prices
        "daily-cents": { type: "string" },
        "daily-usd": { type: "string" },
        "time-zone": { type: "string" },
        alerts: { type: "string" },
        day: { type: "string" },
        input: { type: "string" },
        output: { type: "string" },
        "cached-input": { type: "string" },
        "cache-write": { type: "string" },
        "cache-write-1h": { type: "string" },
        "audio-input": { type: "string" },
        "image-token-multiplier": { type: "string" },
        "long-context-over": { type: "string" },
        "long-input": { type: "string" },
        "long-output": { type: "string" },
        "long-cached-input": { type: "string" },
        "long-cache-write": { type: "string" },
        "long-cache-write-1h": { type: "string" },
        "effective-from": { type: "string" },
        backend: { type: "string" },
        // limits
        rpm: { type: "string" },
        tpm: { type: "string" },
        key: { type: "string" },
        // ledger
        "keep-months": { type: "string" },
        "archive-dir": { type: "string" },
        "months-ahead": { type: "string" },
        drop: { type: "boolean" },
        help: { type: "boolean", short: "h" },
      },
    });
    const [command, ...rest] = positionals;
    if (values.help || !command || (command === "help" && rest.length === 0)) {
      process.stdout.write(usage + "\n");
      return command || values.help ? 0 : 2;
    }
    checkCommandLine(command, rest, values);
    switch (command) {
      // Each command is loaded on demand: a router should not parse the
      // worker agent, and the CLI bundle is split along these lines.
      case "up":
        return await (await import("./commands/up.ts")).upCommand(values);
      case "router":
        return await (await import("./commands/router.ts")).routerCommand(values);
      case "worker": {
        const { workerCommand } = await import("./commands/worker.ts");
        return await workerCommand(values);
      }
      case "spend":
        return await (await import("./commands/spend.ts")).spendCommand(values);
      case "workers": {
        const { workersCommand } = await import("./commands/workers.ts");
        return await workersCommand(rest, values);
      }
      case "db":
        return await (await import("./commands/db.ts")).dbCommand(rest, values);
      case "migrate":
        return await (await import("./commands/migrate.ts")).migrateCommand(values);
      case "tenants":
        return await (await import("./commands/tenants.ts")).tenantsCommand(rest, values);
      case "keys":
        return await (await import("./commands/keys.ts")).keysCommand(rest, values);
      case "budgets":
        return await (await import("./commands/budgets.ts")).budgetsCommand(rest, values);
      case "limits":
        return await (await import("./commands/limits.ts")).limitsCommand(rest, values);
      case "prices":
        return await (await import("./commands/prices.ts")).pricesCommand(rest, values);
      case "ledger":
        return await (await import("./commands/ledger.ts")).ledgerCommand(rest, values);
      case "bench": {
        const { benchCommand } = await import("./commands/bench.ts");
        return await benchCommand(rest, values);
      }
      default:
        throw new UsageError(`unknown command '${command}'`);
    }
  } catch (err) {
    if (err instanceof UsageError || (err as { code?: string } | undefined)?.code?.startsWith("ERR_PARSE_ARGS")) {
      // The parser's own messages do not say which command they are about.
      const command = err instanceof UsageError ? undefined : argv.find((a) => Object.hasOwn(commandFlags, a));
      process.stderr.write(`error: ${command ? `${command}: ` : ""}${(err as Error).message}\n(switchyard --help lists every command and its flags)\n`);
      return 2;
    }
    if (err instanceof ConfigError) {
      process.stderr.write(`error: ${err.message}\n`);
      return 2;
    }
    process.stderr.write(`error: ${describeFailure(err)}\n`);
    return 1;
  }
}

/**
 * A failure's message with its causes: drizzle wraps a Postgres error as
 * "Failed query: CREATE SCHEMA …", the refused connection or the missing
 * database only in its cause.
 */
export function describeFailure(err: unknown): string {
  const parts: string[] = [];
  for (let e: unknown = err, depth = 0; e !== undefined && e !== null && depth < 4; depth++) {
    const message = e instanceof Error ? e.message.split("\nparams:")[0]!.trim() : String(e);
    if (message && !parts.includes(message)) parts.push(message);
    e = e instanceof Error ? (e as Error & { cause?: unknown }).cause : undefined;
  }
  return parts.join(": ") || String(err);
}
