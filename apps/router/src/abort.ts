// Aborts on the request path: the client going away, an attempt's deadline,
// the router's shutdown. An AbortController is an EventTarget, the most
// expensive object the request path made, two or three per request with a
// listener added and removed through each (issue 14); an Abort is an
// EventEmitter with an AbortSignal's `aborted` and `reason`, which undici
// takes as a request's signal as it is.
import { EventEmitter } from "node:events";

export class Abort extends EventEmitter {
  aborted = false;
  reason: unknown = undefined;
  abort(reason?: unknown): void {
    if (this.aborted) return;
    this.aborted = true;
    this.reason = reason;
    this.emit("abort");
  }
}

/** An Abort, or an AbortSignal from outside the request path (the router's shutdown, tests). */
export type AbortLike = Abort | AbortSignal;

/** Calls `fn` once when `signal` aborts; returns the undo. */
export function onAbort(signal: AbortLike, fn: () => void): () => void {
  if (signal instanceof Abort) {
    signal.once("abort", fn);
    return () => signal.off("abort", fn);
  }
  signal.addEventListener("abort", fn, { once: true });
  return () => signal.removeEventListener("abort", fn);
}
