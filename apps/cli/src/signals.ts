// Resolves on the first SIGINT/SIGTERM so commands can shut down in order
// (a router drains, a worker finishes its requests). A second signal while
// that shutdown runs stops the process at once (exit 130): Ctrl-C twice.
export function untilSignal(opts: { onSecond?: (sig: NodeJS.Signals) => void } = {}): Promise<NodeJS.Signals> {
  return new Promise((resolve) => {
    const on = (sig: NodeJS.Signals) => {
      process.off("SIGINT", on);
      process.off("SIGTERM", on);
      const again = (s: NodeJS.Signals) => {
        (opts.onSecond ?? (() => process.stderr.write(`${s} again: stopping now, without waiting for the shutdown\n`)))(s);
        process.exit(130);
      };
      process.once("SIGINT", again);
      process.once("SIGTERM", again);
      resolve(sig);
    };
    process.on("SIGINT", on);
    process.on("SIGTERM", on);
  });
}
