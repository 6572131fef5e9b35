// Preload for `bench router --profile`: each SIGUSR2 writes a heap snapshot
// (the objects alive, after a full collection) to $SNAPSHOT_OUT-N.heapsnapshot,
// N counting from 1; written beside it and renamed when whole, so the bench
// reads it only once complete. The bench takes one idle and one (up to three)
// with its load in flight: what a request keeps alive while it runs
// (bench/lib/heapsnapshot.ts).
import { renameSync } from "node:fs";
import { writeHeapSnapshot } from "node:v8";

const out = process.env.SNAPSHOT_OUT;
if (out) {
  let n = 0;
  process.on("SIGUSR2", () => {
    const file = `${out}-${++n}.heapsnapshot`;
    renameSync(writeHeapSnapshot(`${file}.part`), file);
  });
}
