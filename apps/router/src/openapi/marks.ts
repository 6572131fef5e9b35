// What the OpenAPI document is built from, marked where the routes are
// built: the body schema `jsonBody` validates with, the auth middleware, and
// an optional description on the route's handler. Marks are WeakMap entries
// on the functions Hono already holds — nothing runs per request.
import type * as z from "zod";
import type { ErrorCode } from "../errors.ts";

/** One documented answer: JSON validated by a zod schema, an SSE stream, or bytes. */
export interface ResponseDoc {
  description: string;
  /** The JSON body's schema (default: any JSON object). */
  json?: z.ZodType;
  /** The answer may be an SSE stream (`stream: true`). */
  sse?: boolean;
  /** Other media types the answer may have (e.g. application/octet-stream). */
  binary?: string[];
  /** Only this media type (no JSON). */
  jsonless?: boolean;
  headers?: Record<string, string>;
}

export interface RouteDoc {
  summary: string;
  description?: string;
  tag?: string;
  operationId?: string;
  /** Its query parameters, one per key of the object schema the handler validates the query with (optional; a key's `.describe()` is its description). */
  query?: z.ZodObject;
  /** Success answers by status (default: 200, any JSON object). */
  responses?: Record<number, ResponseDoc>;
  /** Error codes this route may answer beyond those its middleware implies (auth, body checks). */
  errors?: ErrorCode[];
  /**
   * Its errors' body when it is not the one shape: a wire format of its own
   * (Anthropic's on /v1/messages), named in components.schemas; `status`
   * when that format answers some errors with another status (Anthropic's
   * 529 for 503).
   */
  errorShape?: { name: string; schema: z.ZodType; status?: (status: number) => number };
}

const bodies = new WeakMap<object, z.ZodType>();
const auth = new WeakMap<object, string>();
const docs = new WeakMap<object, RouteDoc>();
/** A handler made of several (route-table.ts oneHandler) → those, whose marks it carries. */
const parts = new WeakMap<object, readonly object[]>();

/** `mw` validates the JSON body against `schema` (middleware.ts jsonBody). */
export function markBody<T extends object>(mw: T, schema: z.ZodType): T {
  bodies.set(mw, schema);
  return mw;
}

/** `mw` authenticates the caller with this security scheme (a key of securitySchemes in spec.ts). */
export function markAuth<T extends object>(mw: T, scheme = "bearerAuth"): T {
  auth.set(mw, scheme);
  return mw;
}

/** Describes the route whose handler this is; returns the handler itself. */
export function documented<T extends object>(doc: RouteDoc, handler: T): T {
  docs.set(handler, doc);
  return handler;
}

/** `handler` runs `levels` as one: its marks are theirs. */
export function markParts<T extends object>(handler: T, levels: readonly object[]): T {
  parts.set(handler, levels);
  return handler;
}

/** A mark of `h`, or of the first of its parts that has one. */
function find<M>(map: WeakMap<object, M>, h: object): M | undefined {
  const own = map.get(h);
  if (own !== undefined) return own;
  for (const p of parts.get(h) ?? []) {
    const found = find(map, p);
    if (found !== undefined) return found;
  }
  return undefined;
}

export const marks = {
  body: (h: object) => find(bodies, h),
  auth: (h: object) => find(auth, h),
  doc: (h: object) => find(docs, h),
};
