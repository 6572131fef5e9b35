// Where routes are registered: each route's middleware and handler run as
// ONE Hono handler, under the request context, instead of Hono's compose.
// Compose makes every level an async function awaiting the next — with the
// request context, auth and the body checks, a dozen promises and frames
// per request before the handler starts (issue 14). Here a level that has
// nothing to wait for goes on at once, and one that has returns its promise.
import type { Context, Hono } from "hono";
import type { AppEnv } from "./deps.ts";
import { markParts } from "./openapi/marks.ts";

/** The app's error answer (app.onError's handler): one shape for every error. */
export type ErrorAnswer = (err: unknown, c: Context<AppEnv>) => Response;

/** One of a route's levels: a middleware (it calls next) or its handler (it answers). */
export type Level = (c: Context<AppEnv>, next: () => Promise<void>) => unknown;

/** The methods routes register with, as Hono types them: route files read the same either way. */
export type RouteTable = Pick<Hono<AppEnv>, "get" | "post" | "delete">;

/**
 * `levels` as one handler. Hono's middleware contract holds: a level calls
 * `next()` to run the rest and reads `c.res` after it; a throw or rejection
 * at any level becomes the error answer there, so the levels above it (the
 * access log, metrics) still see a response. One difference: `next()` may
 * return nothing when the rest finished at once, so a level awaits or
 * returns it, never calls `.then` on it.
 */
export function oneHandler(levels: readonly Level[], onError: ErrorAnswer): (c: Context<AppEnv>) => Response | Promise<Response> {
  const last = levels.length - 1;
  const failed = (c: Context<AppEnv>, err: unknown): void => {
    if (err instanceof Error) c.error = err;
    c.res = onError(err, c);
  };
  const answered = (c: Context<AppEnv>, res: unknown): void => {
    if (res instanceof Response && !c.finalized) c.res = res;
  };
  const run = (c: Context<AppEnv>, i: number): void | Promise<void> => {
    let out: unknown;
    try {
      out = levels[i]!(c, i < last ? (() => run(c, i + 1)) as () => Promise<void> : noNext);
    } catch (err) {
      failed(c, err);
      return;
    }
    if (out instanceof Promise) {
      return out.then(
        (res) => answered(c, res),
        (err) => failed(c, err),
      );
    }
    answered(c, out);
  };
  const handler = (c: Context<AppEnv>): Response | Promise<Response> => {
    const done = run(c, 0);
    return done instanceof Promise ? done.then(() => c.res) : c.res;
  };
  // The OpenAPI document reads the body schema and auth from the levels (openapi/spec.ts).
  return markParts(handler, levels);
}

// The last level's next(): a handler answers, it has nothing after it.
const noNext = (): Promise<void> => Promise.reject(new Error("next() called by a route's last handler"));

/**
 * Registers on `app` with `context(path)` (the request context middleware,
 * which labels metrics by the route's pattern) in front of every route's
 * own levels, all as one handler.
 */
export function routeTable(app: Hono<AppEnv>, context: (route: string) => Level, onError: ErrorAnswer): RouteTable {
  const add =
    (method: "get" | "post" | "delete") =>
    (path: string, ...levels: Level[]): RouteTable => {
      app[method](path, oneHandler([context(path), ...levels], onError));
      return table;
    };
  const table = { get: add("get"), post: add("post"), delete: add("delete") } as unknown as RouteTable;
  return table;
}
