// Preload for `bench router --profile`: counts the async resources a router
// process creates (promises, ticks, immediates, timers…) and the HTTP
// requests it serves and sends upstream, and writes the running totals to $CENSUS_OUT twice a
// second, so the bench can take two snapshots around a load and divide.
// Promises per request is the figure that tracks the hot path's async
// layers: each one is an allocation, a microtask turn and garbage.
import { createHook } from "node:async_hooks";
import { subscribe } from "node:diagnostics_channel";
import { writeFileSync } from "node:fs";

const out = process.env.CENSUS_OUT;
if (out) {
  const counts = { requests: 0 };
  subscribe("http.server.request.start", () => {
    counts.requests++;
  });
  // Requests sent upstream, however undici was called (request() makes an
  // async resource of each, a dispatch handler none): its own channel.
  subscribe("undici:request:create", () => {
    counts["upstream requests (undici)"] = (counts["upstream requests (undici)"] ?? 0) + 1;
  });
  createHook({
    init(_id, type) {
      counts[type] = (counts[type] ?? 0) + 1;
    },
  }).enable();
  setInterval(() => {
    try {
      writeFileSync(out, JSON.stringify(counts));
    } catch {
      // the bench's directory is gone: it ended
    }
  }, 500).unref();
}
