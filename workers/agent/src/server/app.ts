// The worker's HTTP API, called by routers: OpenAI-compatible
// chat/completions/embeddings plus binary hidden states and prompt token
// counts (tokenize), one file per route in routes/. This file holds what
// every /v1 request passes first: the router's bearer secret, the drain and
// warm-up gates, lease fencing.
import { timingSafeEqual } from "node:crypto";
import { Hono } from "hono";
import type { WorkerContext } from "./context.ts";
import { errorJson } from "./errors.ts";
import { decodeShardRoute, FENCING_WORKER_HEADER, SHARD_ROUTE_HEADER } from "@switchyard/state";
import { FENCING_HEADER, FENCING_SIGNATURE_HEADER, parseFencingToken } from "./fencing.ts";
import { registerChat } from "./routes/chat.ts";
import { registerCompletions } from "./routes/completions.ts";
import { registerEmbeddings } from "./routes/embeddings.ts";
import { registerHealth } from "./routes/health.ts";
import { registerHiddenStates } from "./routes/hidden-states.ts";
import { registerTokenize } from "./routes/tokenize.ts";

function tokenMatches(header: string | undefined, token: string): boolean {
  const m = header ? /^Bearer\s+(\S+)$/i.exec(header) : null;
  if (!m) return false;
  const a = Buffer.from(m[1]!);
  const b = Buffer.from(token);
  return a.length === b.length && timingSafeEqual(a, b);
}

export function createWorkerApp(ctx: WorkerContext): Hono {
  const app = new Hono();
  registerHealth(app, ctx);

  app.use("/v1/*", async (c, next) => {
    if (!tokenMatches(c.req.header("authorization"), ctx.token)) return errorJson(401, "missing or wrong worker credential", "invalid_worker_token");
    if (ctx.draining) return errorJson(503, "worker is draining", "worker_draining");
    const engine = ctx.supervisor.client;
    if (ctx.supervisor.state === "warming" || !engine?.alive) return errorJson(503, "worker is warming up", "worker_warming");
    // Counted from arrival, not from when the handler has read the body: a
    // drain that began while a request was still uploading waits for it
    // (the handler's own count, for the engine's work, takes over before this ends).
    const arrived = ctx.arrive();
    try {
      await next();
    } finally {
      arrived();
    }
  });

  // Lease fencing: refuse a dispatch whose token is older than one already seen.
  const fencing = ctx.fencing;
  app.use("/v1/*", async (c, next) => {
    const forWorker = c.req.header(FENCING_WORKER_HEADER);
    let verdict;
    if (forWorker === undefined || forWorker === fencing.workerId) {
      verdict = fencing.admit(c.req.header(FENCING_HEADER), c.req.header(FENCING_SIGNATURE_HEADER));
    } else {
      // A head shard, for a lease on a shard after it: the token goes with the
      // request's sequences to that shard, which checks it against its own
      // fencing state (shard/server.ts). Here only that it is one on the route.
      const route = ctx.shardHead ? decodeShardRoute(c.req.header(SHARD_ROUTE_HEADER)) : undefined;
      if (!route?.ok || !route.route.stages.some((s) => s.hops.some((h) => h.id === forWorker))) {
        return errorJson(400, `${FENCING_WORKER_HEADER} names '${forWorker.slice(0, 64)}', which is no shard on this request's route`, "invalid_fencing_token");
      }
      verdict = parseFencingToken(c.req.header(FENCING_HEADER));
    }
    if (!verdict.ok) return errorJson(verdict.status, verdict.message, verdict.code);
    await next();
  });

  // Prefix names come from the router, scoped to the request's tenant
  // (registry/prefix.ts): the worker never names a prompt itself, so what it
  // advertises can't tell anyone that another tenant sent the same prompt.
  // So does the prefix-cache scope (routerCacheScope): the engine reuses a
  // cached prompt only for requests of the same scope, so another tenant's
  // identical prompt gets no faster first token and no cached_tokens.
  registerChat(app, ctx);
  registerCompletions(app, ctx);
  registerEmbeddings(app, ctx);
  registerHiddenStates(app, ctx);
  registerTokenize(app, ctx);

  app.notFound(() => errorJson(404, "no such route", "not_found"));
  app.onError((err) => {
    ctx.log("unhandled error", { error: (err as Error)?.stack ?? String(err) });
    return errorJson(500, "internal error", "internal_error");
  });
  return app;
}
