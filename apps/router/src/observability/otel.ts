// The OpenTelemetry SDK behind tracing.ts's Span: spans exported over
// OTLP/HTTP (JSON) in batches. Loaded only when telemetry.otlpEndpoint is
// set — the one file in the router that imports @opentelemetry/*. Parents
// are passed explicitly (no context manager, no async hooks).
import { ROOT_CONTEXT, SpanKind, SpanStatusCode, TraceFlags, trace, type Span as OtelSpan, type Tracer } from "@opentelemetry/api";
import { OTLPTraceExporter } from "@opentelemetry/exporter-trace-otlp-http";
import { resourceFromAttributes } from "@opentelemetry/resources";
import { AlwaysOnSampler, BatchSpanProcessor, ParentBasedSampler, TraceIdRatioBasedSampler, TracerProvider } from "@opentelemetry/sdk-trace";
import type { Config } from "../config.ts";
import type { Logger } from "./log.ts";
import { parseTraceparent, type Span, type SpanAttrs, type Tracing } from "./tracing.ts";

class OtelRequestSpan implements Span {
  constructor(
    private readonly tracer: Tracer,
    private readonly span: OtelSpan,
  ) {}
  child(name: string, attrs?: SpanAttrs, startPerf?: number): Span {
    const s = this.tracer.startSpan(name, { kind: SpanKind.INTERNAL, ...(attrs ? { attributes: attrs } : {}), ...(startPerf !== undefined ? { startTime: startPerf } : {}) }, trace.setSpan(ROOT_CONTEXT, this.span));
    return new OtelRequestSpan(this.tracer, s);
  }
  set(attrs: SpanAttrs): void {
    this.span.setAttributes(attrs);
  }
  fail(message: string): void {
    this.span.setStatus({ code: SpanStatusCode.ERROR, message });
  }
  end(endPerf?: number): void {
    this.span.end(endPerf);
  }
  traceparent(): string | undefined {
    const sc = this.span.spanContext();
    return `00-${sc.traceId}-${sc.spanId}-${(sc.traceFlags & TraceFlags.SAMPLED) === TraceFlags.SAMPLED ? "01" : "00"}`;
  }
}

/** OTLP/HTTP's traces path under a base endpoint (as OTEL_EXPORTER_OTLP_ENDPOINT is read). */
export function tracesUrl(endpoint: string): string {
  return /\/v1\/traces\/?$/.test(endpoint) ? endpoint : `${endpoint.replace(/\/+$/, "")}/v1/traces`;
}

export function openTracing(cfg: Config["telemetry"] & { otlpEndpoint: string }, log: Logger): Tracing {
  const exporter = new OTLPTraceExporter({ url: tracesUrl(cfg.otlpEndpoint), headers: cfg.headers });
  const provider = new TracerProvider({
    resource: resourceFromAttributes({ "service.name": cfg.serviceName }),
    // A caller's sampling decision stands; a trace that starts here is sampled at sampleRatio.
    sampler: new ParentBasedSampler({ root: cfg.sampleRatio >= 1 ? new AlwaysOnSampler() : new TraceIdRatioBasedSampler(cfg.sampleRatio) }),
    spanProcessors: [new BatchSpanProcessor({ exporter, scheduledDelayMillis: cfg.exportIntervalMs })],
  });
  const tracer = provider.getTracer("switchyard-router");
  log.info("telemetry: exporting traces over OTLP/HTTP", { endpoint: tracesUrl(cfg.otlpEndpoint), sampleRatio: cfg.sampleRatio });
  return {
    request(name, traceparent, attrs) {
      const parent = parseTraceparent(traceparent);
      const ctx = parent ? trace.setSpanContext(ROOT_CONTEXT, { traceId: parent.traceId, spanId: parent.spanId, traceFlags: parent.sampled ? TraceFlags.SAMPLED : TraceFlags.NONE, isRemote: true }) : ROOT_CONTEXT;
      return new OtelRequestSpan(tracer, tracer.startSpan(name, { kind: SpanKind.SERVER, attributes: attrs }, ctx));
    },
    async shutdown() {
      try {
        await provider.shutdown();
      } catch (err) {
        log.warn("telemetry: the last spans could not be exported", { error: (err as Error).message });
      }
    },
  };
}
