// A route's levels as one handler: Hono's middleware contract (next(), c.res
// after it, an error answered at the level that threw) without compose.
import { Hono, type MiddlewareHandler } from "hono";
import { describe, expect, it } from "vitest";
import type { AppEnv } from "./deps.ts";
import { markAuth, marks } from "./openapi/marks.ts";
import { oneHandler, routeTable, type Level } from "./route-table.ts";

const onError = (err: unknown, c: Parameters<MiddlewareHandler<AppEnv>>[0]) => c.json({ error: String((err as Error).message ?? err) }, 418);

/** An outer level that records what it saw after the rest answered, as the request context does. */
function recorder(seen: string[]): MiddlewareHandler<AppEnv> {
  return (c, next) => {
    seen.push("before");
    const done = next() as Promise<void> | void;
    const after = () => void seen.push(`after ${c.res.status}`);
    if (done) return done.then(after);
    after();
    return undefined as unknown as Promise<void>;
  };
}

describe("oneHandler", () => {
  const app = (levels: Level[], seen: string[]) => {
    const hono = new Hono<AppEnv>();
    routeTable(hono, () => recorder(seen), onError).post("/x", ...(levels as [MiddlewareHandler<AppEnv>]));
    return hono;
  };

  it("runs sync and async levels in order, the outer one seeing the handler's answer", async () => {
    const seen: string[] = [];
    const order: string[] = [];
    const res = await app(
      [
        (c, next) => {
          order.push("sync");
          return next();
        },
        async (c, next) => {
          await new Promise((r) => setTimeout(r, 5));
          order.push("async");
          c.set("route", "from a level");
          await next();
        },
        (c) => c.json({ route: c.get("route") }, 201),
      ],
      seen,
    ).request("/x", { method: "POST" });
    expect(res.status).toBe(201);
    expect(await res.json()).toEqual({ route: "from a level" });
    expect(order).toEqual(["sync", "async"]);
    expect(seen).toEqual(["before", "after 201"]);
  });

  it("answers an error where it is thrown or rejected, and the levels above still see that answer", async () => {
    for (const failing of [
      () => {
        throw new Error("sync throw");
      },
      () => Promise.reject(new Error("rejection")),
      async () => {
        await Promise.resolve();
        throw new Error("late throw");
      },
    ] as Level[]) {
      const seen: string[] = [];
      let reached = false;
      const res = await app(
        [
          failing,
          (c) => {
            reached = true;
            return c.json({});
          },
        ],
        seen,
      ).request("/x", { method: "POST" });
      expect(res.status).toBe(418);
      expect(((await res.json()) as { error: string }).error).toMatch(/throw|rejection/);
      expect(reached).toBe(false);
      expect(seen).toEqual(["before", "after 418"]);
    }
  });

  it("a handler that throws, sync or async, is answered the same way", async () => {
    for (const handler of [
      () => {
        throw new Error("handler threw");
      },
      async () => {
        throw new Error("handler rejected");
      },
    ] as Level[]) {
      const seen: string[] = [];
      const res = await app([handler], seen).request("/x", { method: "POST" });
      expect(res.status).toBe(418);
      expect(seen).toEqual(["before", "after 418"]);
    }
  });

  it("carries its levels' marks, for the OpenAPI document", () => {
    const auth = markAuth<MiddlewareHandler<AppEnv>>((c, next) => next());
    const h = oneHandler([auth, (c) => c.json({})], onError);
    expect(marks.auth(h)).toBe("bearerAuth");
    expect(marks.body(h)).toBeUndefined();
  });
});
