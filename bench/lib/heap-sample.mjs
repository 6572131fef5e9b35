// Preload for `bench router --profile`: V8's sampling heap profiler, objects
// the GC has already collected included — what a process allocates, not
// what it keeps. SIGUSR2 starts it, the next SIGUSR2 stops it and writes the
// profile to $HEAP_OUT, so the bench brackets exactly its load. What is
// allocated per request sets how often the young generation is scavenged:
// the router's most frequent pause (issue 14).
import { Session } from "node:inspector";
import { writeFileSync } from "node:fs";

const out = process.env.HEAP_OUT;
if (out) {
  const session = new Session();
  session.connect();
  let sampling = false;
  process.on("SIGUSR2", () => {
    if (!sampling) {
      sampling = true;
      // One sample per 8 KiB on average: a few thousand over a load, with little cost.
      session.post("HeapProfiler.startSampling", { samplingInterval: 8192, includeObjectsCollectedByMajorGC: true, includeObjectsCollectedByMinorGC: true });
      return;
    }
    sampling = false;
    session.post("HeapProfiler.stopSampling", (err, res) => {
      writeFileSync(out, err ? JSON.stringify({ error: err.message }) : JSON.stringify(res.profile));
    });
  });
}
