// Relaying raw bytes (hidden states): the upstream body goes through as it
// comes, under the idle deadline; a failure mid-body cuts the connection.
import type { Backend } from "../backends/types.ts";
import { UpstreamFailure } from "../backends/types.ts";
import { outcomeOf, toFailure, type Attempt } from "./attempt.ts";
import type { RelayContext } from "./context.ts";

/** Bytes through as they come (hidden states); a failure mid-body cuts the connection. */
export function relayRaw(backend: Backend, raw: { headers: Record<string, string>; body: AsyncIterable<Uint8Array> }, a: Attempt, ctx: RelayContext): Response {
  const it = raw.body[Symbol.asyncIterator]();
  a.timer.arm("idle", ctx.deadlines.idleMs);
  const stream = new ReadableStream<Uint8Array>({
    async pull(controller) {
      try {
        const next = await it.next();
        if (next.done) {
          a.cleanup();
          a.report("ok");
          controller.close();
          return;
        }
        a.timer.refresh();
        controller.enqueue(next.value);
      } catch (err) {
        a.cleanup();
        const failure = toFailure(err, a);
        a.report(outcomeOf(failure), { failure });
        ctx.log.warn("raw relay failed", { backend: backend.id, error: failure.message });
        controller.error(err);
      }
    },
    cancel() {
      a.controller.abort(new UpstreamFailure("aborted", "client went away", false));
      a.cleanup();
      a.report("neutral");
    },
  });
  return new Response(stream, { status: 200, headers: { ...raw.headers, "x-request-id": ctx.requestId, "x-switchyard-backend": backend.id, ...ctx.headers } });
}
