// Request classes: what kind of request this is (route × stream × prompt
// size), the unit the scorer keeps latency statistics per, with the
// request's tenant-scoped prefix name and the tenant's engine cache scope.
import { createHash } from "node:crypto";
import { prefixKey } from "@switchyard/state";
import type { InferencePath } from "../backends/types.ts";
import { promptBound, requestedMaxOutput, type PromptBound } from "../billing/estimate.ts";

/** What kind of request this is, for latency statistics. */
export interface RequestClass extends PromptBound {
  /** route × stream × prompt-size bucket, e.g. "chat|stream|s". */
  key: string;
  path: InferencePath;
  stream: boolean;
  /** Upper bound of prompt tokens (billing/estimate.ts), and of them imageTokens (imageTileTokens: the same images in OpenAI's tiles) and audioTokens (for the budget hold). */
  promptTokens: number;
  /** max_tokens the client asked for, if any. */
  maxOutput?: number;
  /** Names the request's long shared prefix (first message or prompt) for its tenant, if it has one. */
  prefixKey?: string;
  /** The tenant's engine prefix-cache scope (`cacheScope`), when the request has a tenant. */
  cacheScope?: string;
  /** The request carries Anthropic's 1M-context beta: only then may Anthropic bill its long-context tier (backends/anthropic/betas.ts priceBefore). */
  contextOneM?: boolean;
}

/**
 * The body field a router puts the tenant's engine prefix-cache scope in, on
 * every worker attempt (null: no tenant). The agent passes it to the engine as
 * `Generate.cache_salt`; the engine reuses cached keys and values only under
 * the same salt, so one tenant's cached prompt never gives another tenant's
 * identical one a faster first token or `cached_tokens` (docs/SECURITY.md).
 */
export const CACHE_SCOPE_FIELD = "switchyard_cache_scope";

/**
 * A tenant's prefix-cache scope: 16 bytes of SHA-256 over a domain tag and
 * the tenant's id — the same on every router, unrelated between tenants, and
 * never the tenant's name.
 */
const scopes = new Map<string, string>();
export function cacheScope(tenantId: string): string {
  // A pure function of the tenant id, asked once per request: remembered (bounded; a full map starts over).
  let scope = scopes.get(tenantId);
  if (scope === undefined) {
    scope = createHash("sha256").update(`switchyard:cache-scope\u0000${tenantId}`).digest("base64url").slice(0, 22);
    if (scopes.size >= 10_000) scopes.clear();
    scopes.set(tenantId, scope);
  }
  return scope;
}

const routeNames: Record<InferencePath, string> = {
  "/v1/chat/completions": "chat",
  "/v1/completions": "cmpl",
  "/v1/embeddings": "emb",
  "/v1/hidden_states": "hs",
};

function sizeBucket(tokens: number): string {
  if (tokens <= 1_024) return "s";
  if (tokens <= 8_192) return "m";
  if (tokens <= 32_768) return "l";
  return "xl";
}

/**
 * `tenant`: the tenant's id, the scope of the prefix name (without one the
 * request gets no prefix name, and no affinity). `bound`: the body's
 * promptBound when the caller has it already (the walk is real work: PDFs
 * inflated, images' headers read).
 */
export function requestClass(path: InferencePath, body: Record<string, unknown>, tenant?: string, bound: PromptBound = promptBound(path, body), contextOneM = false): RequestClass {
  const stream = body.stream === true;
  const { promptTokens, imageTokens, imageTileTokens, audioTokens } = bound;
  const maxOutput = requestedMaxOutput(path, body);
  const prefix = tenant === undefined ? undefined : prefixKey(path, body, tenant);
  const scope = tenant === undefined ? undefined : cacheScope(tenant);
  return {
    key: `${routeNames[path]}|${stream ? "stream" : "whole"}|${sizeBucket(promptTokens)}`,
    path,
    stream,
    promptTokens,
    imageTokens,
    imageTileTokens,
    audioTokens,
    ...(maxOutput ? { maxOutput } : {}),
    ...(prefix ? { prefixKey: prefix } : {}),
    ...(scope ? { cacheScope: scope } : {}),
    ...(contextOneM ? { contextOneM } : {}),
  };
}

/** The class assumed by callers that don't say (a small streamed chat). */
export const defaultRequestClass: RequestClass = requestClass("/v1/chat/completions", { stream: true, messages: [] });
