// GET /readyz — Redis (or the in-process store) and Postgres answer, and the
// router is not shutting down; and what kinds of state this router runs on
// (no addresses: the endpoint is public). A draining router (SIGTERM) answers
// 503 "draining" at once, so a load balancer stops sending it new requests
// while its live streams finish. Being public, its checks are shared
// (sharedCheck): a flood of /readyz is not a flood of Redis and Postgres pings.
import type { AppDeps, AppEnv } from "../../deps.ts";
import type { RouteTable } from "../../route-table.ts";
import * as z from "zod";
import { publicSummary } from "../../observability/summary.ts";
import { documented } from "../../openapi/marks.ts";

const readiness = z.looseObject({ status: z.enum(["ready", "not_ready", "draining"]), redis: z.boolean(), postgres: z.boolean(), workers: z.number().int() });
const doc = {
  summary: "Readiness",
  tag: "health",
  operationId: "readyz",
  responses: { 200: { description: "ready", json: readiness }, 503: { description: "not ready, or draining", json: readiness } },
};

export function registerReadyz(app: RouteTable, deps: AppDeps): void {
  app.get("/readyz", documented(doc, async (c) => {
    const r = await deps.readiness();
    const ok = r.redis && r.postgres && !r.draining;
    const status = r.draining ? "draining" : ok ? "ready" : "not_ready";
    return c.json(
      {
        status,
        redis: r.redis,
        postgres: r.postgres,
        ...(r.draining ? { draining: true } : {}),
        workers: deps.directory.all().length,
        ...(deps.summary ? { state: publicSummary(deps.summary) } : {}),
      },
      ok ? 200 : 503,
    );
  }));
}

/**
 * `check` run by one caller at a time, its answer given to every caller for
 * `freshMs` after it settles (a rejection too): any number of probes cost
 * at most one run per `freshMs`.
 */
export function sharedCheck<T>(freshMs: number, check: () => Promise<T>, now: () => number = performance.now.bind(performance)): () => Promise<T> {
  let last: { answer: Promise<T>; until: number } | undefined;
  return () => {
    if (last && now() < last.until) return last.answer;
    const entry = { answer: check(), until: Infinity };
    last = entry;
    const settled = () => {
      entry.until = now() + freshMs;
    };
    entry.answer.then(settled, settled);
    return entry.answer;
  };
}
