// The worker's HTTP API, called by routers: OpenAI-compatible
// chat/completions/embeddings plus binary hidden states. Every request must
// carry the router's bearer secret.
import { timingSafeEqual } from "node:crypto";
import { Hono, type Context } from "hono";
import { ModelKind } from "@switchyard/proto/switchyard/engine/v1/engine_pb";
import type { WorkerContext } from "./context.ts";
import { errorJson } from "./errors.ts";
import { FENCING_HEADER, FENCING_SIGNATURE_HEADER, FencingGuard } from "./fencing.ts";
import { contentText, routerCacheScope, runGenerate, type GenerateBody } from "./generate.ts";
import { runEmbeddings } from "./routes/embeddings.ts";
import { runHiddenStates } from "./routes/hidden-states.ts";
import { routerPrefixName } from "@switchyard/state";

function tokenMatches(header: string | undefined, token: string): boolean {
  const m = header ? /^Bearer\s+(\S+)$/i.exec(header) : null;
  if (!m) return false;
  const a = Buffer.from(m[1]!);
  const b = Buffer.from(token);
  return a.length === b.length && timingSafeEqual(a, b);
}

async function jsonBody(c: Context): Promise<Record<string, unknown> | Response> {
  try {
    const body = (await c.req.json()) as unknown;
    if (!body || typeof body !== "object" || Array.isArray(body)) return errorJson(400, "body must be a JSON object", "invalid_request");
    return body as Record<string, unknown>;
  } catch {
    return errorJson(400, "request body is not valid JSON", "invalid_json");
  }
}

export function createWorkerApp(ctx: WorkerContext): Hono {
  const app = new Hono();
  app.get("/healthz", (c) => c.json({ status: "ok", state: ctx.draining ? "draining" : ctx.supervisor.state, inFlight: ctx.inFlight }));

  app.use("/v1/*", async (c, next) => {
    if (!tokenMatches(c.req.header("authorization"), ctx.token)) return errorJson(401, "missing or wrong worker credential", "invalid_worker_token");
    if (ctx.draining) return errorJson(503, "worker is draining", "worker_draining");
    const engine = ctx.supervisor.client;
    if (ctx.supervisor.state === "warming" || !engine?.alive) return errorJson(503, "worker is warming up", "worker_warming");
    await next();
  });

  // Lease fencing: refuse a dispatch whose token is older than one already seen.
  const fencing = new FencingGuard(ctx.fencingStatePath, ctx.fencingKey);
  app.use("/v1/*", async (c, next) => {
    const verdict = fencing.admit(c.req.header(FENCING_HEADER), c.req.header(FENCING_SIGNATURE_HEADER));
    if (!verdict.ok) return errorJson(verdict.status, verdict.message, verdict.code);
    await next();
  });

  const requireModel = (model: unknown, kind: ModelKind): Response | undefined => {
    if (typeof model !== "string" || !model) return errorJson(400, "model: required", "invalid_request", "model");
    const loaded = ctx.supervisor.loaded.get(model);
    if (!loaded) return errorJson(404, `model '${model}' is not loaded on this worker`, "model_not_found", "model");
    if (loaded.kind !== kind) return errorJson(400, `model '${model}' does not support this endpoint`, "invalid_request", "model");
    return undefined;
  };

  const requestId = (c: Context) => c.req.header("x-request-id") ?? "req";
  // Prefix names come from the router, scoped to the request's tenant
  // (registry/prefix.ts): the worker never names a prompt itself, so what it
  // advertises can't tell anyone that another tenant sent the same prompt.
  // So does the prefix-cache scope (routerCacheScope): the engine reuses a
  // cached prompt only for requests of the same scope, so another tenant's
  // identical prompt gets no faster first token and no cached_tokens.

  app.post("/v1/chat/completions", async (c) => {
    const body = await jsonBody(c);
    if (body instanceof Response) return body;
    const bad = requireModel(body.model, ModelKind.LLAMA_GGUF);
    if (bad) return bad;
    if (!Array.isArray(body.messages) || body.messages.length === 0) return errorJson(400, "messages: at least one message is required", "invalid_request", "messages");
    const messages = (body.messages as { role?: unknown; content?: unknown }[]).map((m) => ({ role: String(m.role ?? "user"), content: contentText(m.content) }));
    // vLLM's continuation fields: the router's stream resume sends them.
    const continueFinal = body.continue_final_message === true;
    if (continueFinal && messages.at(-1)!.role !== "assistant") {
      return errorJson(400, "continue_final_message: the last message must be the assistant's", "invalid_request", "messages");
    }
    if (continueFinal && body.add_generation_prompt === true) {
      return errorJson(400, "continue_final_message and add_generation_prompt cannot both be true", "invalid_request", "add_generation_prompt");
    }
    return runGenerate(ctx, ctx.pipeline ?? ctx.supervisor.client!, body as unknown as GenerateBody, { case: "messages", value: messages, continueFinal }, { chat: true, requestId: requestId(c), signal: c.req.raw.signal, prefix: routerPrefixName(body), cacheScope: routerCacheScope(body) });
  });

  app.post("/v1/completions", async (c) => {
    const body = await jsonBody(c);
    if (body instanceof Response) return body;
    const bad = requireModel(body.model, ModelKind.LLAMA_GGUF);
    if (bad) return bad;
    const prompt = Array.isArray(body.prompt) ? body.prompt[0] : body.prompt;
    if (typeof prompt !== "string") return errorJson(400, "prompt: a string is required", "invalid_request", "prompt");
    return runGenerate(ctx, ctx.pipeline ?? ctx.supervisor.client!, body as unknown as GenerateBody, { case: "prompt", value: prompt }, { chat: false, requestId: requestId(c), signal: c.req.raw.signal, prefix: routerPrefixName(body), cacheScope: routerCacheScope(body) });
  });

  app.post("/v1/embeddings", async (c) => {
    const body = await jsonBody(c);
    if (body instanceof Response) return body;
    const bad = requireModel(body.model, ModelKind.BERT);
    if (bad) return bad;
    return runEmbeddings(ctx, ctx.supervisor.client!, body);
  });

  app.post("/v1/hidden_states", async (c) => {
    const body = await jsonBody(c);
    if (body instanceof Response) return body;
    const bad = requireModel(body.model, ModelKind.LLAMA_GGUF);
    if (bad) return bad;
    return runHiddenStates(ctx, ctx.supervisor.client!, body, (c.req.header("accept") ?? "").includes("application/json"));
  });

  app.notFound(() => errorJson(404, "no such route", "not_found"));
  app.onError((err) => {
    ctx.log("unhandled error", { error: (err as Error)?.stack ?? String(err) });
    return errorJson(500, "internal error", "internal_error");
  });
  return app;
}
