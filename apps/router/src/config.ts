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

/** A step of a fall-through chain: self-hosted workers on this machine or elsewhere, then paid APIs. */
export const chainSteps = ["local", "remote", "openrouter", "anthropic"] as const;
export type ChainStep = (typeof chainSteps)[number];
const chainStep = z.enum(chainSteps);

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
  /** Paid APIs; each is on when its key is set. */
  providers: z
    .object({
      openrouter: z
        .object({
          apiKey: z.string().min(1),
          baseUrl: z.url().default("https://openrouter.ai/api/v1"),
          /** Sent as HTTP-Referer / X-Title: how OpenRouter attributes the app. */
          referer: z.string().optional(),
          title: z.string().default("Switchyard"),
        })
        .optional(),
      anthropic: z
        .object({
          apiKey: z.string().min(1),
          baseUrl: z.url().default("https://api.anthropic.com"),
          version: z.string().default("2023-06-01"),
          /** Anthropic requires max_tokens; used when the client sent none. */
          defaultMaxTokens: z.number().int().positive().default(4096),
        })
        .optional(),
    })
    .prefault({}),
  routing: z
    .object({
      /** The fall-through chain: where a request may run, in order. */
      chain: z.array(chainStep).min(1).default(["local", "remote", "openrouter", "anthropic"]),
      /** Per-tenant chains, by tenant name (e.g. a tenant that must never reach paid APIs). */
      tenantChains: z.record(z.string(), z.array(chainStep).min(1)).default({}),
      /**
       * Model aliases: one name the client uses, the name each kind of
       * backend knows. Without an alias a model goes to workers serving that
       * name, to OpenRouter when it looks like an OpenRouter id ("vendor/model"),
       * to Anthropic when it starts with "claude-".
       */
      models: z
        .record(
          z.string(),
          z.object({ worker: z.string().optional(), openrouter: z.string().optional(), anthropic: z.string().optional() }),
        )
        .default({}),
    })
    .prefault({}),
  billing: z
    .object({
      /**
       * How long a budget hold lives if nobody settles it (a crashed
       * router's money comes back after this). Keep it above deadlines.totalMs.
       */
      holdTtlMs: z.number().int().positive().default(660_000),
      /** Output tokens held for (and sent as max_tokens to) a paid backend when the client asks for more or none. */
      maxOutputTokens: z.number().int().positive().default(4096),
      /** How often a router re-reads prices; budgets are cached this long too. */
      refreshMs: z.number().int().min(0).default(5_000),
      /** Ledger rows per INSERT at most. */
      ledgerBatch: z.number().int().min(1).max(1000).default(500),
      /** How long the ledger drain waits for more rows before inserting a batch. */
      ledgerFlushMs: z.number().int().min(1).default(100),
      /** A buffered row read by a router that stopped answering is taken over after this long. */
      ledgerClaimIdleMs: z.number().int().min(100).default(15_000),
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
  OPENROUTER_API_KEY: ["providers", "openrouter", "apiKey"],
  ANTHROPIC_API_KEY: ["providers", "anthropic", "apiKey"],
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
