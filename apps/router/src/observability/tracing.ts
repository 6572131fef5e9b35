// Tracing on the request path, with no OpenTelemetry in sight: a Span the
// pipeline opens children of, and `noSpan` when telemetry is off — then no
// SDK is loaded (otel.ts is imported only by startTracing, only when
// telemetry.otlpEndpoint is set; test/telemetry checks that) and a request
// pays one property read. W3C traceparent in, traceparent out to workers.
import type { Config } from "../config.ts";
import type { Logger } from "./log.ts";

export type SpanAttrs = Record<string, string | number | boolean>;

export interface Span {
  /** A child span; `startPerf` (performance.now()) backdates it. */
  child(name: string, attrs?: SpanAttrs, startPerf?: number): Span;
  set(attrs: SpanAttrs): void;
  /** Marks the span failed, with why. */
  fail(message: string): void;
  end(endPerf?: number): void;
  /** The W3C traceparent naming this span, for the next hop; undefined when not traced. */
  traceparent(): string | undefined;
}

export const noSpan: Span = {
  child: () => noSpan,
  set() {},
  fail() {},
  end() {},
  traceparent: () => undefined,
};

export interface Tracing {
  /** The root span of one request, a child of the caller's traceparent when it sent a valid one. */
  request(name: string, traceparent: string | undefined, attrs: SpanAttrs): Span;
  /** Exports what is buffered and stops. */
  shutdown(): Promise<void>;
}

export interface TraceParent {
  traceId: string;
  spanId: string;
  sampled: boolean;
}

const traceparentPattern = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$/;

/** A W3C traceparent (version 00, or a later one read as 00), or undefined when malformed or all-zero. */
export function parseTraceparent(header: string | undefined): TraceParent | undefined {
  const m = header ? traceparentPattern.exec(header.trim().toLowerCase()) : null;
  if (!m || m[1] === "ff" || (m[1] === "00" && m[5] !== undefined)) return undefined;
  if (/^0+$/.test(m[2]!) || /^0+$/.test(m[3]!)) return undefined;
  return { traceId: m[2]!, spanId: m[3]!, sampled: (parseInt(m[4]!, 16) & 1) === 1 };
}

/** Tracing when telemetry.otlpEndpoint is set (the SDK loaded now, not before); otherwise undefined. */
export async function startTracing(cfg: Config["telemetry"], log: Logger): Promise<Tracing | undefined> {
  if (!cfg.otlpEndpoint) return undefined;
  const { openTracing } = await import("./otel.ts");
  return openTracing({ ...cfg, otlpEndpoint: cfg.otlpEndpoint }, log);
}
