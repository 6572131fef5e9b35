// Aborts on the request path: the client going away, an attempt's deadline,
// the router's shutdown. An AbortController is an EventTarget, the most
// expensive object the request path made, two or three per request with a
// listener added and removed through each (issue 14). An Abort has an
// AbortSignal's `aborted` and `reason`, and of an EventEmitter only what
// undici calls on a request's signal (`once` and `removeListener`; it checks
// that `on` exists), so undici takes it as a request's signal as it is. Not
// an EventEmitter either: constructing one, and `once`'s wrapper per
// listener, was most of what a request's two Aborts cost.

type Listener = () => void;

export class Abort {
  aborted = false;
  reason: unknown = undefined;
  // Most Aborts get one or two listeners and never fire.
  private listeners: Listener[] | undefined = undefined;

  abort(reason?: unknown): void {
    if (this.aborted) return;
    this.aborted = true;
    this.reason = reason;
    const fns = this.listeners;
    this.listeners = undefined;
    // Each listener once, in the order added; one added while these run is not called (the signal has aborted: it checks `aborted`).
    if (fns) for (const fn of fns) fn();
  }

  /** EventEmitter's shape for undici: an "abort" listener, called at most once (an Abort aborts once). */
  on(_event: "abort", fn: Listener): this {
    if (!this.aborted) (this.listeners ??= []).push(fn);
    return this;
  }

  once(event: "abort", fn: Listener): this {
    return this.on(event, fn);
  }

  off(_event: "abort", fn: Listener): this {
    const fns = this.listeners;
    if (fns) {
      const i = fns.lastIndexOf(fn);
      if (i >= 0) fns.splice(i, 1);
    }
    return this;
  }

  removeListener(event: "abort", fn: Listener): this {
    return this.off(event, fn);
  }

  /** Listeners waiting (tests: an ended request leaves none behind). */
  listenerCount(_event: "abort"): number {
    return this.listeners?.length ?? 0;
  }
}

/** An Abort, or an AbortSignal from outside the request path (the router's shutdown, tests). */
export type AbortLike = Abort | AbortSignal;

/** Calls `fn` once when `signal` aborts; returns the undo. */
export function onAbort(signal: AbortLike, fn: () => void): () => void {
  if (signal instanceof Abort) {
    signal.on("abort", fn);
    return () => signal.off("abort", fn);
  }
  signal.addEventListener("abort", fn, { once: true });
  return () => signal.removeEventListener("abort", fn);
}
