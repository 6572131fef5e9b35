// The OpenAPI 3.1 document of the public app, built from the app itself:
// every route Hono holds is an operation; its request body is the zod schema
// its `jsonBody` validates with (one source: what is documented is what is
// checked), its security the auth middleware it runs, its errors the codes
// those imply plus the ones its `documented(...)` handler names, every error
// in the one shape. A route added with `routes.post(path, authenticate(deps),
// jsonBody(deps, schema), handler)` (route-table.ts: its levels run as one
// handler, whose marks are theirs) is in the document with nothing more.
import type { Hono } from "hono";
import * as z from "zod";
import { errorCodes, type ErrorCode } from "../errors.ts";
import { marks, type ResponseDoc, type RouteDoc } from "./marks.ts";

type Json = Record<string, unknown>;

/** The one error shape (errors.ts errorBody). */
export const errorBodySchema = z.object({
  error: z.object({
    message: z.string(),
    type: z.string(),
    param: z.string().nullable(),
    code: z.enum(Object.keys(errorCodes) as [ErrorCode, ...ErrorCode[]]),
    request_id: z.string().optional(),
  }),
});

function jsonSchema(schema: z.ZodType, io: "input" | "output"): Json {
  const { $schema: _drop, ...rest } = z.toJSONSchema(schema, { target: "draft-2020-12", io, unrepresentable: "any" }) as Json;
  return rest;
}

const anyObject = { type: "object", additionalProperties: true };
/** One SSE event: `data:` a JSON chunk (or [DONE], or an error object after the first byte). */
const sseEvent = { type: "object", properties: { event: { type: "string" }, data: { type: "string" }, id: { type: "string" } }, required: ["data"] };

function responseObject(r: ResponseDoc): Json {
  const content: Json = {};
  if (!r.jsonless) content["application/json"] = { schema: r.json ? jsonSchema(r.json, "output") : anyObject };
  // OpenAPI 3.1 has `schema` describe one event of a stream (3.2 would say itemSchema).
  if (r.sse) content["text/event-stream"] = { schema: sseEvent };
  for (const t of r.binary ?? []) content[t] = { schema: { type: "string", contentEncoding: "binary" } };
  const out: Json = { description: r.description, content };
  if (r.headers) out.headers = Object.fromEntries(Object.entries(r.headers).map(([h, d]) => [h, { description: d, schema: { type: "string" } }]));
  return out;
}

/** Statuses an error code list answers with, each with the codes behind it. */
function errorStatuses(codes: Iterable<ErrorCode>, statusOf: (status: number) => number = (s) => s): Map<number, ErrorCode[]> {
  const out = new Map<number, ErrorCode[]>();
  for (const code of codes) {
    const s = statusOf(errorCodes[code].status);
    if (s === 499) continue; // nobody reads it: the client is gone
    out.set(s, [...(out.get(s) ?? []), code]);
  }
  return new Map([...out].sort(([a], [b]) => a - b));
}

/** The query parameters of an object schema: each key optional unless the schema requires it, its description lifted from the schema. */
function queryParameters(query: z.ZodObject | undefined): Json[] {
  if (!query) return [];
  const whole = jsonSchema(query, "input") as { properties?: Record<string, Json>; required?: string[] };
  return Object.entries(whole.properties ?? {}).map(([name, schema]) => {
    const { description, ...rest } = schema;
    return { name, in: "query", required: (whole.required ?? []).includes(name), ...(typeof description === "string" ? { description } : {}), schema: rest };
  });
}

export interface OpenApiInfo {
  title?: string;
  version?: string;
}

export function buildOpenApi(app: Hono<any>, info: OpenApiInfo = {}): Json {
  // Hono keeps one entry per handler: group them by method and path, in registration order.
  const ops = new Map<string, { method: string; path: string; handlers: object[] }>();
  for (const r of app.routes) {
    if (r.method === "ALL") continue; // app.use middleware
    const k = `${r.method} ${r.path}`;
    let op = ops.get(k);
    if (!op) ops.set(k, (op = { method: r.method, path: r.path, handlers: [] }));
    op.handlers.push(r.handler);
  }
  const paths: Record<string, Record<string, Json>> = {};
  const errorSchemas: Record<string, Json> = { Error: jsonSchema(errorBodySchema, "output") };
  for (const { method, path, handlers } of ops.values()) {
    let body: z.ZodType | undefined;
    let scheme: string | undefined;
    let doc: RouteDoc | undefined;
    for (const h of handlers) {
      body ??= marks.body(h);
      scheme ??= marks.auth(h);
      doc ??= marks.doc(h);
    }
    const codes = new Set<ErrorCode>(doc?.errors ?? []);
    if (scheme) for (const c of ["missing_api_key", "invalid_api_key", "revoked_api_key"] as const) codes.add(c);
    if (body) for (const c of ["invalid_json", "invalid_request", "payload_too_large", "unsupported_media_type"] as const) codes.add(c);
    const params = [...path.matchAll(/:([A-Za-z0-9_]+)/g)].map((m) => m[1]!);
    const oaPath = path.replace(/:([A-Za-z0-9_]+)/g, "{$1}");
    const responses: Json = {};
    for (const [status, r] of Object.entries(doc?.responses ?? { 200: { description: "OK" } })) responses[status] = responseObject(r);
    const errorName = doc?.errorShape?.name ?? "Error";
    if (doc?.errorShape) errorSchemas[errorName] ??= jsonSchema(doc.errorShape.schema, "output");
    for (const [status, list] of errorStatuses(codes, doc?.errorShape?.status)) {
      responses[String(status)] = {
        description: list.join(", "),
        ...(status === 429 || status === 503 || status === 504 || status === 529 ? { headers: { "retry-after": { description: "seconds to wait before retrying", schema: { type: "string" } } } } : {}),
        content: { "application/json": { schema: { $ref: `#/components/schemas/${errorName}` } } },
      };
    }
    const lower = method.toLowerCase();
    const operation: Json = {
      operationId: doc?.operationId ?? `${lower}${oaPath.replace(/[{}]/g, "").replace(/[^A-Za-z0-9]+(.)?/g, (_, ch: string | undefined) => (ch ?? "").toUpperCase())}`,
      summary: doc?.summary ?? `${method} ${oaPath}`,
      ...(doc?.description ? { description: doc.description } : {}),
      ...(doc?.tag ? { tags: [doc.tag] } : {}),
      ...(params.length || doc?.query ? { parameters: [...params.map((name) => ({ name, in: "path", required: true, schema: { type: "string" } })), ...queryParameters(doc?.query)] } : {}),
      ...(body ? { requestBody: { required: true, content: { "application/json": { schema: jsonSchema(body, "input") } } } } : {}),
      ...(scheme ? { security: [{ [scheme]: [] }] } : {}),
      responses,
    };
    (paths[oaPath] ??= {})[lower] = operation;
  }
  return {
    openapi: "3.1.0",
    info: {
      title: info.title ?? "Switchyard",
      version: info.version ?? "1",
      description: "An OpenAI-compatible endpoint over self-hosted workers and paid APIs. Every error has one shape (components.schemas.Error), except on POST /v1/messages and POST /v1/messages/count_tokens, which answer in Anthropic's (components.schemas.AnthropicError).",
    },
    paths,
    components: {
      schemas: errorSchemas,
      securitySchemes: {
        bearerAuth: { type: "http", scheme: "bearer", description: "a Switchyard API key, sy_…" },
      },
    },
  };
}
