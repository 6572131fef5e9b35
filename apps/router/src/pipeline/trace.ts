// The spans of one inference request, while tracing (observability/tracing.ts):
// admission, routing, each budget hold, each attempt with its first token,
// and the settle — children of the request's root span. Off, `requestTrace`
// is undefined and every helper here is a pass-through.
import type { Context } from "hono";
import type { AppEnv } from "../deps.ts";
import type { Span } from "../observability/tracing.ts";
import type { RelayContext } from "../relay/context.ts";

/** The request's root span, or undefined when not tracing. */
export function requestTrace(c: Context<AppEnv>): Span | undefined {
  return c.get("span");
}

/** Runs one stage inside a span of its own; not tracing, it is `run()` itself (no async frame around it). */
export function stage<T>(root: Span | undefined, name: string, run: () => T | Promise<T>): T | Promise<T> {
  if (!root) return run();
  return spanned(root, name, run);
}

async function spanned<T>(root: Span, name: string, run: () => T | Promise<T>): Promise<T> {
  const span = root.child(name);
  try {
    return await run();
  } catch (err) {
    span.fail((err as Error)?.message ?? String(err));
    throw err;
  } finally {
    span.end();
  }
}

/**
 * The relay context with its hooks traced: each budget hold, each attempt
 * (its traceparent is what the backend is sent, so the worker's part of the
 * trace hangs under it) with a first_token span for streams, and the settle.
 */
export function traced(root: Span | undefined, ctx: RelayContext): RelayContext {
  if (!root) return ctx;
  const { admit, observe, settle } = ctx;
  if (admit) {
    ctx.admit = async (b) => {
      const span = root.child("budget.hold", { "switchyard.backend": b.id, "switchyard.paid": b.paid });
      try {
        const v = await admit(b);
        span.set({ "switchyard.hold": v.ok ? "admitted" : v.reason });
        return v;
      } finally {
        span.end();
      }
    };
  }
  ctx.observe = (b) => {
    const startedAt = performance.now();
    const span = root.child("attempt", { "switchyard.backend": b.id, "switchyard.backend_kind": b.kind }, startedAt);
    ctx.traceparent = span.traceparent();
    const report = observe?.(b);
    return (r) => {
      if (r.ttftMs !== undefined) span.child("first_token", {}, startedAt).end(startedAt + r.ttftMs);
      span.set({ "switchyard.outcome": r.outcome, ...(r.status !== undefined ? { "http.response.status_code": r.status } : {}) });
      if (r.outcome === "failed") span.fail(r.failure ?? "failed");
      span.end(startedAt + r.durationMs);
      report?.(r);
    };
  };
  if (settle) {
    ctx.settle = (o) => {
      const span = root.child("settle", {
        "switchyard.backend": o.backend.id,
        "switchyard.status": o.status,
        ...(o.usage ? { "gen_ai.usage.input_tokens": o.usage.prompt, "gen_ai.usage.output_tokens": o.usage.completion } : {}),
      });
      try {
        settle(o);
      } finally {
        span.end();
      }
    };
  }
  return ctx;
}
