// Router configuration: a YAML file plus SWITCHYARD_* environment overrides,
// validated once at boot. Nothing else in the router reads its settings from
// process.env (processes.ts reads NODE_OPTIONS and what a primary tells the
// router processes it forks, which are not settings).
//
// Env mapping: SWITCHYARD_<SECTION>__<KEY>=value sets section.key (double
// underscore between levels; keys are camelCase in YAML, SCREAMING_SNAKE in
// env). A few well-known variables have short aliases (see envAliases).
import { readFileSync, existsSync } from "node:fs";
import { createRequire } from "node:module";
import * as z from "zod";
import { parseCidr } from "./routing/worker-url.ts";
import { unknownConfigKeys } from "./config-keys.ts";
import { aliasFields, providerKeys, providerRegistry, providersShape, type ProviderKey } from "./backends/registry.ts";
import { checkRedisTarget, DEFAULT_REGISTRY_SWEEP_MS, type RedisTarget } from "@switchyard/state";

const deadlinesSchema = z.object({
  /** TCP connect to the backend. */
  connectMs: z.number().int().positive().default(2_000),
  /**
   * Request sent → a stream's response headers received; for a whole answer
   * from a worker, how often the registry is asked whether it still lists
   * that worker while its answer is awaited (answerMs bounds the wait).
   */
  headersMs: z.number().int().positive().default(10_000),
  /**
   * Request sent → a whole (non-streamed) answer received, headers and
   * body: a backend sends those headers only once it has generated the
   * whole answer, so a long answer would fail `headersMs` while still being
   * written (and a paid one be billed for nothing delivered).
   */
  answerMs: z.number().int().positive().default(600_000),
  /** Response headers → first SSE event (streams only). */
  firstTokenMs: z.number().int().positive().default(30_000),
  /** Longest silence between two SSE events. */
  idleMs: z.number().int().positive().default(30_000),
  /** Whole request, end to end. */
  totalMs: z.number().int().positive().default(600_000),
});

/** A step of a fall-through chain: self-hosted workers on this machine or elsewhere, then paid APIs (backends/registry.ts). */
export type ChainStep = "local" | "remote" | ProviderKey;
export const chainSteps: readonly ChainStep[] = ["local", "remote", ...providerKeys];
const chainStep = z.enum(chainSteps as [ChainStep, ...ChainStep[]]);

/** Admission priority bands, highest first. */
export const priorityBands = ["interactive", "standard", "batch"] as const;
export type PriorityBand = (typeof priorityBands)[number];
const priorityBand = z.enum(priorityBands);

const bandSchema = (d: { ceiling: number; maxQueue: number; ttlMs: number; retryAfterS: number }) =>
  z
    .object({
      /** Admitted only while the pool's saturation is below this (1.0 = every decode slot busy). */
      ceiling: z.number().positive().max(100).default(d.ceiling),
      /** Requests that may wait per worker pool in this band; beyond → 503 queue_full. */
      maxQueue: z.number().int().min(0).default(d.maxQueue),
      /** Longest wait for admission; beyond → 504 queue_timeout. */
      ttlMs: z.number().int().positive().default(d.ttlMs),
      /** Retry-After (seconds) sent with this band's 503 and 504. */
      retryAfterS: z.number().int().min(1).default(d.retryAfterS),
    })
    .prefault({});

/** Admission control (apps/router/src/admission/): priority bands with saturation ceilings and fair queues. */
const admissionSchema = z
  .object({
    /** Off: every request goes straight to routing (the bench compares both). */
    enabled: z.boolean().default(true),
    /** The band of a tenant without its own entry… */
    defaultBand: priorityBand.default("standard"),
    /** …and the highest it may ask for with x-switchyard-priority (higher → 403 priority_not_allowed). */
    maxBand: priorityBand.default("standard"),
    bands: z
      .object({
        interactive: bandSchema({ ceiling: 1.0, maxQueue: 1_000, ttlMs: 10_000, retryAfterS: 1 }),
        standard: bandSchema({ ceiling: 0.9, maxQueue: 1_000, ttlMs: 30_000, retryAfterS: 2 }),
        batch: bandSchema({ ceiling: 0.7, maxQueue: 10_000, ttlMs: 120_000, retryAfterS: 10 }),
      })
      .prefault({}),
    /** Requests one tenant may have waiting per worker pool, all bands together (beyond: 429 tenant_queue_full); each band's maxQueue still bounds all tenants together. */
    maxQueuedPerTenant: z.number().int().positive().default(100),
    /**
     * Per tenant (by name); a tenant given only defaultBand may ask up to at least that band.
     * weight: its share of a pool's slots against the other tenants holding or waiting for them (default 1).
     */
    tenants: z
      .record(z.string(), z.object({ defaultBand: priorityBand.optional(), maxBand: priorityBand.optional(), weight: z.number().positive().max(1_000).optional() }))
      .default({}),
  })
  .superRefine((a, ctx) => {
    const rank = (b: PriorityBand) => priorityBands.indexOf(b);
    if (a.bands.interactive.ceiling < a.bands.standard.ceiling || a.bands.standard.ceiling < a.bands.batch.ceiling) {
      ctx.addIssue({ code: "custom", path: ["bands"], message: "ceilings must not rise as priority falls (interactive ≥ standard ≥ batch)" });
    }
    if (rank(a.defaultBand) < rank(a.maxBand)) ctx.addIssue({ code: "custom", path: ["defaultBand"], message: "defaultBand is above maxBand" });
    for (const [name, t] of Object.entries(a.tenants)) {
      if (t.defaultBand && t.maxBand && rank(t.defaultBand) < rank(t.maxBand)) {
        ctx.addIssue({ code: "custom", path: ["tenants", name, "defaultBand"], message: "defaultBand is above maxBand" });
      }
    }
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
      /**
       * How long a client's idle keep-alive connection is kept open. Above a
       * load balancer's own idle timeout (AWS ALB 60 s, nginx's upstream
       * keepalive_timeout 60 s): the side that closes an idle connection must
       * be the client's, or a request it sends as the router closes arrives on
       * a dead socket, and a POST cannot be safely retried (a 502 at the
       * balancer, ECONNRESET at a slow client). Node's own default is 5 s.
       */
      keepAliveTimeoutMs: z.number().int().min(1_000).max(3_600_000).default(75_000),
      /**
       * Connections the kernel may hold accepted but not yet taken up by the
       * router (listen(2)'s backlog, capped by net.core.somaxconn). Node's
       * default is 511: a burst of new connections beyond it has its SYNs
       * dropped, and each client waits out a 1 s, 3 s, 7 s… retransmit with
       * the router idle.
       */
      listenBacklog: z.number().int().min(1).max(65_535).default(4_096),
      /**
       * Requests one router process answers at once (its public listener's,
       * streams included) before it refuses new inference requests with a
       * fast 503 router_overloaded and Retry-After, instead of queueing them
       * behind the rest; 0: no limit. Per process: with --processes N the
       * router holds N times this.
       */
      maxInFlight: z.number().int().min(0).default(0),
      /** Retry-After (seconds) sent with 503 when no worker can serve. */
      retryAfterS: z.number().int().min(1).default(1),
      /**
       * Largest non-streamed (JSON) answer read from a worker or provider; beyond → 502 upstream_response_too_large.
       * Above what a sound worker sends within the request limits: 2048 MiniLM embeddings as JSON floats are ~17 MB.
       */
      maxUpstreamBodyBytes: z.number().int().positive().default(32 * 1024 * 1024),
      /** Largest /v1/hidden_states answer (safetensors bytes, relayed as they come). */
      maxUpstreamHiddenStatesBytes: z.number().int().positive().default(256 * 1024 * 1024),
      /** Longest SSE line, and largest SSE event, read from a worker or provider. */
      maxUpstreamEventBytes: z.number().int().positive().default(1024 * 1024),
      /**
       * After SIGTERM: /readyz answers 503 at once, but new connections are
       * still accepted this long (a load balancer needs a probe or two to
       * notice); then the listener closes. Counted inside drainMs.
       */
      drainGraceMs: z.number().int().min(0).default(5_000),
      /**
       * After SIGTERM, in-flight requests (live streams) have this long, from
       * the signal, to finish; those still running then end with one SSE error
       * event (router_shutting_down). Keep preStop sleep + drainMs + ~10 s of
       * ledger flush below terminationGracePeriodSeconds.
       */
      drainMs: z.number().int().min(0).default(60_000),
      /**
       * spend_ledger partitions kept ahead: the current month and this many
       * after it, created at start and checked daily (one router at a time).
       */
      ledgerMonthsAhead: z.number().int().min(1).max(24).default(2),
      /**
       * Router processes sharing the listener (`switchyard router`; --processes
       * overrides): one per core when unset. The primary restarts one that
       * dies and serves the admin port for all of them (metrics added up).
       */
      processes: z.number().int().min(1).max(512).optional(),
    })
    .prefault({}),
  deadlines: deadlinesSchema.prefault({}),
  /**
   * The fabric's Redis: exactly one of url (one node), cluster (Redis Cluster
   * seeds) or sentinels + name (a Sentinel-watched primary). None: the
   * in-process store (single-machine mode). See packages/state/src/redis.ts.
   */
  redis: z
    .object({
      /** `redis[s]://[user:pass@]host:port[/db]`. */
      url: z.string().optional(),
      /** Redis Cluster seed nodes, `host:port` each, all of one cluster (env: JSON list). */
      cluster: z.array(z.string().min(1)).optional(),
      /** Sentinels, `host:port` each (env: JSON list); with `name`. */
      sentinels: z.array(z.string().min(1)).optional(),
      /** The primary's name in the Sentinels. */
      name: z.string().min(1).optional(),
      /** ACL user and password on the data nodes (cluster / sentinels; the url form carries its own). */
      username: z.string().optional(),
      password: z.string().optional(),
      /** TLS to the data nodes and Sentinels (cluster / sentinels; the url form says rediss://). */
      tls: z.boolean().optional(),
      /** The Sentinels' own credentials, when they have any. */
      sentinelUsername: z.string().optional(),
      sentinelPassword: z.string().optional(),
      // Keys carry their own hash tags ({leases}, {tenant:N}…): braces in the
      // prefix would replace them, and every multi-key script fail CROSSSLOT
      // on a Cluster (or all state sit in one slot).
      keyPrefix: z.string().regex(/^[^{}]*$/, "must not contain { or }: the keys' own hash tags place them on a Redis Cluster").default("sy:"),
    })
    .superRefine((r, ctx) => {
      try {
        checkRedisTarget(r);
      } catch (err) {
        ctx.addIssue({ code: "custom", message: (err as Error).message.replace(/^redis[.:]\s*/, "") });
      }
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
      /** Worker records over this many bytes are refused unread (a worker must not make routers parse megabytes every poll). */
      maxRecordBytes: z.number().int().min(1024).max(1024 * 1024).default(16 * 1024),
      /**
       * How often a router also SCANs for worker and invite keys missing from
       * the registry's sets (written by an older version), ms; 0: only at
       * start. Polls themselves never SCAN (docs/REGISTRY.md).
       */
      sweepMs: z.number().int().min(0).default(DEFAULT_REGISTRY_SWEEP_MS),
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
      /**
       * With secretKey and Redis: how often each router checks that every
       * Redis node still has the invited workers' ACL users and invite keys
       * Postgres records, and puts back what is missing (Redis drops ACL
       * users at every restart). Also checked when the connection to Redis
       * comes back. 0: never.
       */
      inviteSyncMs: z.number().int().min(0).default(10_000),
      /**
       * Networks (CIDRs) worker URLs may point into, checked on every
       * address a worker's host resolves to; empty: anywhere but the
       * always-refused addresses (link-local, cloud metadata, unspecified,
       * multicast, this router's own listeners and its Redis and Postgres).
       */
      allowedNetworks: z
        .array(
          z.string().refine((c) => parseCidr(c) !== undefined, { message: "must be a CIDR such as 10.0.0.0/8 or fd00::/8" }),
        )
        .default([]),
    })
    .prefault({}),
  log: z
    .object({
      level: z.enum(["debug", "info", "warn", "error"]).default("info"),
    })
    .prefault({}),
  /** Paid APIs, each section declared by its provider (backends/<name>/provider.ts); each is on when its section (its key) is set. */
  providers: z.object(providersShape()).prefault({}),
  routing: z
    .object({
      /** The fall-through chain: where a request may run, in order. */
      chain: z.array(chainStep).min(1).default([...chainSteps]),
      /** Per-tenant chains, by tenant name (e.g. a tenant that must never reach paid APIs). */
      tenantChains: z.record(z.string(), z.array(chainStep).min(1)).default({}),
      /**
       * Model aliases: one name the client uses, the name each kind of
       * backend knows. Without an alias a model goes to OpenRouter when it
       * looks like an OpenRouter id ("vendor/model"), to Anthropic when it
       * starts with "claude-", and otherwise to workers serving that name; a
       * paid backend's name reaches workers only through an alias's `worker`.
       */
      models: z
        .record(
          z.string(),
          z.object({ worker: z.string().optional(), ...aliasFields() }),
        )
        .default({}),
      /**
       * How candidates are ordered inside a chain step (routing/scorer.ts):
       * expected latency × load × availability, plus cost for paid backends.
       */
      scorer: z
        .object({
          /** `score`: latency/load/availability/cost aware; `round_robin`: rotate (the benchmark's baseline). */
          mode: z.enum(["score", "round_robin"]).default("score"),
          /** A worker full to its capacity (in flight + queued) looks (1 + loadWeight)× slower. */
          loadWeight: z.number().min(0).default(1),
          /** Recent failures: expected latency × (1 + failureWeight × failure rate). */
          failureWeight: z.number().min(0).default(4),
          /** Milliseconds of expected latency one US cent of expected cost is worth (paid backends). */
          costMsPerCent: z.number().min(0).default(1000),
          /** A free backend goes ahead of a paid one in an earlier step when its score is at most this many times the paid one's. */
          freeComparableRatio: z.number().min(1).default(1.5),
          /** A worker that last served this request's long first message (its engine caches the prefix) has its score multiplied by this; 1 turns affinity off. */
          prefixAffinity: z.number().gt(0).max(1).default(0.5),
          /** Chance a request explores: a random other healthy candidate goes first. */
          epsilon: z.number().min(0).max(1).default(0.05),
          /** Latency samples kept per backend × request class… */
          windowSize: z.number().int().min(8).max(4096).default(64),
          /** …and how long one counts. */
          windowMs: z.number().int().positive().default(60_000),
          /** Samples before a backend's own p95 is trusted (until then: the median of its peers'). */
          minSamples: z.number().int().min(1).default(5),
          /** Expected latency when nothing is known about a class yet. */
          defaultLatencyMs: z.number().positive().default(250),
          /** Output tokens assumed for a paid backend's expected cost when the client set no max_tokens. */
          expectedOutputTokens: z.number().int().positive().default(256),
          /** Send x-switchyard-route on every answer (otherwise only when the client sends x-switchyard-debug: route). */
          debugHeader: z.boolean().default(false),
        })
        .prefault({}),
      /** Ejection of failing workers (routing/health.ts). */
      health: z
        .object({
          /** Consecutive failures (5xx, broken streams) that eject a worker. */
          failureThreshold: z.number().int().min(1).default(3),
          /** Consecutive connect failures or deadline timeouts (unreachable or hung) that eject a worker. */
          hardFailureThreshold: z.number().int().min(1).default(1),
          /** First ejection; each further one in a row doubles it… */
          baseEjectMs: z.number().int().positive().default(1_000),
          /** …up to this. */
          maxEjectMs: z.number().int().positive().default(30_000),
        })
        .prefault({}),
      /**
       * Resuming a stream that broke mid-way on another worker (the prompt plus
       * the text already sent, so the client sees one stream). Opt-in per
       * request with `x-switchyard-resume: true`, or for every request here.
       */
      resume: z
        .object({
          enabled: z.boolean().default(false),
          /** Continuations per request at most. */
          maxResumes: z.number().int().min(1).max(10).default(2),
        })
        .prefault({}),
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
      /**
       * How often a router looks for paid attempts orphaned by a dead router
       * (their intents untouched for ledgerClaimIdleMs) and finishes those
       * whose hold has expired: the provider's own cost, else the hold.
       */
      orphanScanMs: z.number().int().min(50).default(5_000),
      /** Orphans whose cost is looked up at the provider at once, at most. */
      orphanLookupConcurrency: z.number().int().min(1).max(64).default(8),
    })
    .prefault({}),
  /** GPU leases (docs/LEASES.md). */
  leases: z
    .object({
      /** Shortest and longest lease a client may ask for (and extend by), in seconds. */
      minDurationS: z.number().positive().default(1),
      maxDurationS: z.number().positive().default(3_600),
      /** Longest `wait_s` a client may ask for when every matching worker is leased. */
      maxWaitS: z.number().min(0).default(300),
      /** How often a router re-reads the live leases (its snapshot for routing). */
      pollMs: z.number().int().min(20).default(250),
      /** Requests without the lease that wait, per leased worker and router, for a lease to end. */
      queueDepthPerWorker: z.number().int().min(0).default(16),
      /** How long they wait before falling through the chain (paid backends) or 503. */
      queueWaitMs: z.number().int().min(0).default(2_000),
      /**
       * Live leases one tenant may hold at once (0: no cap). Where tenants
       * share workers, set it: without it one key can lease every worker
       * and hold them by extending.
       */
      maxPerTenant: z.number().int().min(0).default(0),
      /**
       * A worker's fencing record in Redis (the highest token granted on
       * it) is forgotten this long after its last lease ended, so the
       * record does not keep one entry per worker id ever leased. At least
       * 2 × (maxDurationS + maxWaitS): far above how long a router holds a
       * token before granting with it (docs/LEASES.md, Redis layout).
       */
      fenceIdleS: z.number().int().positive().default(7 * 86_400),
    })
    .superRefine((l, ctx) => {
      if (l.fenceIdleS < 2 * (l.maxDurationS + l.maxWaitS)) {
        ctx.addIssue({ code: "custom", path: ["fenceIdleS"], message: `must be at least 2 × (maxDurationS + maxWaitS) = ${2 * (l.maxDurationS + l.maxWaitS)}` });
      }
    })
    .prefault({}),
  admission: admissionSchema.prefault({}),
  /** Stored /v1/responses answers (previous_response_id, GET /v1/responses/{id}): in Redis when configured, else in this process. */
  responses: z
    .object({
      /** How long a stored response can be continued or retrieved, in seconds (at most 30 days). */
      ttlS: z.number().int().min(1).max(30 * 86_400).default(86_400),
      /** The longest conversation a response may carry (as JSON, in bytes: its chat messages or its input items, whichever is longer — both are stored); a longer one is the client's 400. */
      maxConversationBytes: z.number().int().positive().default(4 * 1024 * 1024),
    })
    .prefault({}),
  /** OpenTelemetry traces (docs/TELEMETRY.md): off, and the SDK not even loaded, unless otlpEndpoint is set. */
  telemetry: z
    .object({
      /** OTLP/HTTP collector base URL (traces go to <url>/v1/traces), e.g. http://otel-collector:4318. */
      otlpEndpoint: z.url({ protocol: /^https?$/ }).optional(),
      /** Extra headers on every export (a collector's API key), env: JSON map. */
      headers: z.record(z.string(), z.string()).default({}),
      serviceName: z.string().min(1).default("switchyard-router"),
      /** Share of traces started here that are kept (a caller's sampled flag always wins). */
      sampleRatio: z.number().min(0).max(1).default(1),
      /** How long spans wait to be exported in a batch. */
      exportIntervalMs: z.number().int().min(10).max(60_000).default(1_000),
    })
    .prefault({}),
  /**
   * Per-tenant and per-key rate limits (docs/LIMITS.md). The limits
   * themselves are rows set with `switchyard limits set`; routers count
   * against them in Redis (or this process without Redis).
   */
  rateLimits: z
    .object({
      /** Off: no limit is read or counted (no x-ratelimit-* headers). */
      enabled: z.boolean().default(true),
      /** The sliding window the limits count in: `--rpm`/`--tpm` are per this window (a minute; tests shorten it). */
      windowMs: z.number().int().min(100).max(86_400_000).default(60_000),
      /** How long a router trusts the limits it read from Postgres (a change takes effect within this). */
      refreshMs: z.number().int().min(0).default(5_000),
    })
    .prefault({}),
  /**
   * /v1/embeddings request bounds (400 beyond). Workers refuse more than
   * 2048 inputs or 4 MiB of text themselves, so these may only go lower.
   */
  embeddings: z
    .object({
      /** Inputs (strings in the `input` array) per request; OpenAI's limit is 2048. */
      maxInputs: z.number().int().min(1).max(2048).default(2048),
      /** Characters across all inputs of one request. */
      maxInputChars: z.number().int().min(1).max(1_048_576).default(1_048_576),
    })
    .prefault({}),
});

export type Config = z.infer<typeof configSchema>;

/** The configured Redis (url, cluster or sentinels), or undefined for the in-process store. */
export function redisTarget(config: Pick<Config, "redis">): RedisTarget | undefined {
  const { keyPrefix: _prefix, ...target } = config.redis;
  return checkRedisTarget(target) ? target : undefined;
}
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
  ...Object.fromEntries(providerRegistry.map((p) => [p.apiKeyEnv, ["providers", p.key, "apiKey"]])),
};

function camel(s: string): string {
  return s.toLowerCase().replace(/_([a-z0-9])/g, (_, c: string) => c.toUpperCase());
}

/** The SWITCHYARD_* variable that sets a dotted config path. */
function envName(dotted: string): string {
  return `SWITCHYARD_${dotted
    .split(".")
    .map((k) => k.replace(/([a-z0-9])([A-Z])/g, "$1_$2").toUpperCase())
    .join("__")}`;
}

function coerce(raw: string): unknown {
  if (/^-?\d+(\.\d+)?$/.test(raw)) return Number(raw);
  if (raw === "true") return true;
  if (raw === "false") return false;
  // Lists and maps (routing.chain, workers.allowedNetworks) as JSON: `["10.0.0.0/8"]`.
  if (/^\s*[[{]/.test(raw)) {
    try {
      return JSON.parse(raw) as unknown;
    } catch {
      throw new ConfigError(`environment value ${raw.slice(0, 40)} starts like JSON but does not parse`);
    }
  }
  return raw;
}

function setPath(target: Record<string, unknown>, path: string[], value: unknown): void {
  // `__proto__` would reach Object.prototype, not the config.
  if (path.includes("__proto__")) throw new ConfigError(`invalid configuration key '${path.join(".")}'`);
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

/**
 * The YAML parser, loaded on the first config file: evaluating the package
 * is a sixth of a router's start-up CPU, and a router configured by its
 * environment alone (containers, the benches) never reads YAML.
 */
let yamlParse: ((text: string) => unknown) | undefined;
function parseYaml(text: string): unknown {
  yamlParse ??= (createRequire(import.meta.url)("yaml") as typeof import("yaml")).parse;
  return yamlParse(text);
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
  // Where each environment-set key came from, to name the variable in errors.
  const fromEnv = new Map<string, string>();
  for (const [name, value] of Object.entries(env)) {
    if (value === undefined || value === "") continue;
    const alias = Object.hasOwn(envAliases, name) ? envAliases[name] : undefined;
    if (alias) {
      setPath(raw, alias, coerce(value));
      fromEnv.set(alias.join("."), name);
    } else if (name.startsWith("SWITCHYARD_") && name.includes("__")) {
      const keyPath = name.slice("SWITCHYARD_".length).split("__").map(camel);
      setPath(raw, keyPath, coerce(value));
      fromEnv.set(keyPath.join("."), name);
    }
  }
  for (const [k, v] of Object.entries(opts.overrides ?? {})) {
    setPath(raw, k.split("."), v);
    fromEnv.delete(k); // the override is what the value now comes from
  }
  /** Where a dotted key's value came from: its variable, else the file (overrides: nowhere to name). */
  const origin = (dotted: string) => {
    const env = fromEnv.get(dotted) ?? [...fromEnv].find(([p]) => p.startsWith(`${dotted}.`) || dotted.startsWith(`${p}.`))?.[1];
    return { env, where: env ? ` (from ${env})` : file && !Object.hasOwn(opts.overrides ?? {}, dotted) ? ` (in ${file})` : "" };
  };
  const unknown = unknownConfigKeys(configSchema, raw);
  if (unknown.length > 0) {
    const lines = unknown.map((u) => {
      const { env, where } = origin(u.path);
      const hint = u.suggestion ? `; did you mean ${env ? envName(u.suggestion) : u.suggestion}?` : "";
      return `  ${u.path}: unknown key${where}${hint}`;
    });
    throw new ConfigError(`invalid configuration:\n${lines.join("\n")}`);
  }
  const parsed = configSchema.safeParse(raw);
  if (!parsed.success) {
    const lines = parsed.error.issues.map((i) => `  ${i.path.join(".") || "(root)"}: ${i.message}${i.path.length > 0 ? origin(i.path.join(".")).where : ""}`);
    throw new ConfigError(`invalid configuration:\n${lines.join("\n")}`);
  }
  return parsed.data;
}
