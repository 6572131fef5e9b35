// undici's Pool and errors, the only parts of it the router uses, loaded
// without the rest of the package. `import … from "undici"` evaluates its
// index, which pulls in fetch, WebSocket, EventSource, the cache and the
// mocks: ~1 MB of source that a router parses on every start (issue 14's
// cold start ≤ 500 ms). The index's one piece of wiring the Pool needs is
// the request API on Dispatcher's prototype, done here as it does it.
import type * as undici from "undici";
import PoolImpl from "undici/lib/dispatcher/pool.js";
import DispatcherImpl from "undici/lib/dispatcher/dispatcher.js";
import api from "undici/lib/api/index.js";
import errorsImpl from "undici/lib/core/errors.js";

Object.assign((DispatcherImpl as { prototype: object }).prototype, api);

export const Pool = PoolImpl as typeof undici.Pool;
export type Pool = undici.Pool;
export const errors = errorsImpl as typeof undici.errors;
