// Router configuration: a YAML file plus SWITCHYARD_* environment overrides,
// validated once at boot. Nothing else in the router reads process.env.
//
// Env mapping: SWITCHYARD_<SECTION>__<KEY>=value sets section.key (double
// underscore between levels; keys are camelCase in YAML, SCREAMING_SNAKE in
// env). A few well-known variables have short aliases (see envAliases).
import { readFileSync, existsSync } from "node:fs";
import { parse as parseYaml } from "yaml";
import { z } from "zod";

const deadlinesSchema = z.object({
  /** TCP connect to the backend. */
  connectMs: z.number().int().positive().default(2_000),
  /** Request sent → response headers received. */
  headersMs: z.number().int().positive().default(10_000),
  /** Response headers → first SSE event (streams only). */
  firstTokenMs: z.number().int().positive().default(30_000),
  /** Longest silence between two SSE events. */
  idleMs: z.number().int().positive().default(30_000),
  /** Whole request, end to end. */
  totalMs: z.number().int().positive().default(600_000),
});

export const configSchema = z.object({
  home: z.string().default("./.switchyard"),
  router: z
    .object({
      host: z.string().default("127.0.0.1"),
      port: z.number().int().min(0).max(65535).default(8080),
      adminHost: z.string().default("127.0.0.1"),
      adminPort: z.number().int().min(0).max(65535).default(9090),
      tls: z
        .object({ certFile: z.string().min(1), keyFile: z.string().min(1) })
        .optional(),
      bodyLimitBytes: z.number().int().positive().default(4 * 1024 * 1024),
      /** Backends tried per request at most (first try + failovers). */
      maxAttempts: z.number().int().min(1).max(10).default(3),
      /** How long a resolved API key is trusted before Postgres is asked again. */
      keyCacheMs: z.number().int().min(0).default(2_000),
      /** Open connections kept per worker at most (each live stream holds one). */
      maxConnectionsPerWorker: z.number().int().min(1).default(8192),
      /** Retry-After (seconds) sent with 503 when no worker can serve. */
      retryAfterS: z.number().int().min(1).default(1),
    })
    .prefault({}),
  deadlines: deadlinesSchema.prefault({}),
  redis: z
    .object({
      /** Unset: the in-process store (single-machine mode). */
      url: z.string().optional(),
      keyPrefix: z.string().default("sy:"),
    })
    .prefault({}),
  database: z
    .object({
      /** Unset: embedded PostgreSQL under <home>/pg. */
      url: z.string().optional(),
    })
    .prefault({}),
  registry: z
    .object({
      /** How often a router re-reads the worker registry. */
      pollMs: z.number().int().min(50).default(250),
    })
    .prefault({}),
  workers: z
    .object({
      /** Shared secret the router presents to every worker (single-machine mode, tests). */
      token: z.string().min(8).optional(),
      /**
       * Key from which each invited worker's own call secret is derived
       * (HMAC of the worker id); set it on every router and on the admin
       * host that runs `switchyard workers invite`. Takes precedence over token.
       */
      secretKey: z.string().min(16).optional(),
    })
    .prefault({}),
  log: z
    .object({
      level: z.enum(["debug", "info", "warn", "error"]).default("info"),
    })
    .prefault({}),
});

export type Config = z.infer<typeof configSchema>;
export type Deadlines = z.infer<typeof deadlinesSchema>;

export class ConfigError extends Error {
  override name = "ConfigError";
}

const envAliases: Record<string, string[]> = {
  DATABASE_URL: ["database", "url"],
  REDIS_URL: ["redis", "url"],
  SWITCHYARD_HOME: ["home"],
  SWITCHYARD_PORT: ["router", "port"],
  SWITCHYARD_HOST: ["router", "host"],
  SWITCHYARD_WORKER_TOKEN: ["workers", "token"],
  SWITCHYARD_WORKER_SECRET_KEY: ["workers", "secretKey"],
};

function camel(s: string): string {
  return s.toLowerCase().replace(/_([a-z0-9])/g, (_, c: string) => c.toUpperCase());
}

function coerce(raw: string): unknown {
  if (/^-?\d+(\.\d+)?$/.test(raw)) return Number(raw);
  if (raw === "true") return true;
  if (raw === "false") return false;
  return raw;
}

function setPath(target: Record<string, unknown>, path: string[], value: unknown): void {
  let node = target;
  for (const key of path.slice(0, -1)) {
    const next = node[key];
    if (typeof next !== "object" || next === null) node[key] = {};
    node = node[key] as Record<string, unknown>;
  }
  node[path[path.length - 1]!] = value;
}

export interface LoadConfigOptions {
  file?: string;
  env?: Record<string, string | undefined>;
  overrides?: Record<string, unknown>;
}

/** Reads, merges and validates; throws ConfigError naming the bad key. */
export function loadConfig(opts: LoadConfigOptions = {}): Config {
  const env = opts.env ?? {};
  const file = opts.file ?? env.SWITCHYARD_CONFIG ?? (existsSync("switchyard.yaml") ? "switchyard.yaml" : undefined);
  let raw: Record<string, unknown> = {};
  if (file) {
    if (!existsSync(file)) throw new ConfigError(`config file ${file} does not exist`);
    try {
      raw = (parseYaml(readFileSync(file, "utf8")) as Record<string, unknown>) ?? {};
    } catch (err) {
      throw new ConfigError(`config file ${file} is not valid YAML: ${(err as Error).message}`);
    }
  }
  for (const [name, value] of Object.entries(env)) {
    if (value === undefined || value === "") continue;
    const alias = envAliases[name];
    if (alias) {
      setPath(raw, alias, coerce(value));
    } else if (name.startsWith("SWITCHYARD_") && name.includes("__")) {
      setPath(raw, name.slice("SWITCHYARD_".length).split("__").map(camel), coerce(value));
    }
  }
  for (const [k, v] of Object.entries(opts.overrides ?? {})) setPath(raw, k.split("."), v);
  const parsed = configSchema.safeParse(raw);
  if (!parsed.success) {
    const lines = parsed.error.issues.map((i) => `  ${i.path.join(".") || "(root)"}: ${i.message}`);
    throw new ConfigError(`invalid configuration:\n${lines.join("\n")}`);
  }
  return parsed.data;
}
