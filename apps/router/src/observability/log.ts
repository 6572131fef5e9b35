// JSON-lines logger. One line per event, always with a timestamp and level;
// request-scoped lines carry the request id.
export type LogLevel = "debug" | "info" | "warn" | "error";
const order: Record<LogLevel, number> = { debug: 10, info: 20, warn: 30, error: 40 };

/** Its methods are called on the logger (`log.warn(…)`), not detached. */
export interface Logger {
  debug(msg: string, fields?: Record<string, unknown>): void;
  info(msg: string, fields?: Record<string, unknown>): void;
  warn(msg: string, fields?: Record<string, unknown>): void;
  error(msg: string, fields?: Record<string, unknown>): void;
  child(fields: Record<string, unknown>): Logger;
}

export function createLogger(level: LogLevel = "info", base: Record<string, unknown> = {}, write: (line: string) => void = stdoutLine): Logger {
  return new JsonLogger(order[level], base, undefined, write);
}

/**
 * Lines gathered and written together once per event-loop turn. A router at
 * info level logs a line per request, and stdout to a pipe or a file is
 * written synchronously: a write(2) per line was a third of what info level
 * cost over warn (+14 → +9.5 µs per whole answer, the non-streaming closed
 * loop; docs/BENCHMARKS.md, "the young generation"). A turn's lines go
 * out in one write once its I/O callbacks are done (setImmediate), at once
 * past `maxChars`, and on flush(): stdout's is flushed on process 'exit',
 * which process.exit() and an uncaught exception both emit, so only a
 * SIGKILL can lose lines — those of the turn it lands in.
 */
export class LineBatcher {
  private pending = "";
  private scheduled = false;

  constructor(
    private readonly out: { write(text: string): unknown },
    private readonly maxChars = 64 * 1024,
  ) {}

  readonly line = (line: string): void => {
    this.pending += line + "\n";
    if (this.pending.length >= this.maxChars) this.flush();
    else if (!this.scheduled) {
      this.scheduled = true;
      setImmediate(this.flush);
    }
  };

  readonly flush = (): void => {
    this.scheduled = false;
    if (this.pending === "") return;
    const text = this.pending;
    this.pending = "";
    this.out.write(text);
  };
}

// One batcher for every logger writing to stdout: their lines keep their order.
let stdoutLines: LineBatcher | undefined;

function stdoutLine(line: string): void {
  if (!stdoutLines) {
    stdoutLines = new LineBatcher(process.stdout);
    process.on("exit", stdoutLines.flush);
  }
  stdoutLines.line(line);
}

// Every request makes a child (its request id): a child is one small object,
// its fields merged with its parent's only when it first writes a line.
class JsonLogger implements Logger {
  private merged: Record<string, unknown> | undefined;
  constructor(
    private readonly min: number,
    private readonly parent: Record<string, unknown> | JsonLogger,
    private readonly own: Record<string, unknown> | undefined,
    private readonly write: (line: string) => void,
  ) {}

  private base(): Record<string, unknown> {
    if (this.merged) return this.merged;
    const parent = this.parent instanceof JsonLogger ? this.parent.base() : this.parent;
    return (this.merged = this.own ? { ...parent, ...this.own } : parent);
  }

  private emit(lvl: LogLevel, msg: string, fields?: Record<string, unknown>): void {
    if (order[lvl] < this.min) return;
    this.write(JSON.stringify({ ts: new Date().toISOString(), level: lvl, msg, ...this.base(), ...fields }));
  }

  debug(msg: string, fields?: Record<string, unknown>): void {
    this.emit("debug", msg, fields);
  }
  info(msg: string, fields?: Record<string, unknown>): void {
    this.emit("info", msg, fields);
  }
  warn(msg: string, fields?: Record<string, unknown>): void {
    this.emit("warn", msg, fields);
  }
  error(msg: string, fields?: Record<string, unknown>): void {
    this.emit("error", msg, fields);
  }
  child(fields: Record<string, unknown>): Logger {
    return new JsonLogger(this.min, this, fields, this.write);
  }
}

export const silentLogger: Logger = createLogger("error", {}, () => {});
