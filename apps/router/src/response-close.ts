// What runs when a response closes (its last byte written, or the client
// gone first): one 'close' listener per response, shared by every part of
// the router that asks — the draining count, the client's abort signal, the
// admission place — instead of a `once` each: an array of once-wrappers (a
// bound function and its state per listener, cloned on emit, each removed
// again) on every response (issue 14).
import type { ServerResponse } from "node:http";

/** Called with the response that closed, so a hook need not close over it. */
export type CloseHook = (res: ServerResponse) => void;

const HOOKS = Symbol("switchyard.closeHooks");
type Hooked = ServerResponse & { [HOOKS]?: CloseHook | CloseHook[] };

/** Runs `hook(res)` once, when `res` closes; hooks run in the order they were added. */
export function onResponseClose(res: ServerResponse, hook: CloseHook): void {
  const r = res as Hooked;
  const hooks = r[HOOKS];
  if (hooks === undefined) {
    r[HOOKS] = hook;
    // `on`, not `once`: a response closes once, and then it is garbage.
    res.on("close", runHooks);
  } else if (typeof hooks === "function") r[HOOKS] = [hooks, hook];
  else hooks.push(hook);
}

function runHooks(this: Hooked): void {
  const hooks = this[HOOKS];
  this[HOOKS] = undefined;
  if (typeof hooks === "function") return hooks(this);
  if (!hooks) return;
  // Each runs whatever another threw; the first error is rethrown after, as an emitter's listener's would be.
  let failed: { err: unknown } | undefined;
  for (const hook of hooks) {
    try {
      hook(this);
    } catch (err) {
      failed ??= { err };
    }
  }
  if (failed) throw failed.err;
}
