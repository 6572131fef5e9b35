// A tiny OTLP/HTTP receiver for tests: takes POST /v1/traces in OTLP's JSON
// encoding (what @opentelemetry/exporter-trace-otlp-http sends) and keeps
// every span, flattened.
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";

export interface ReceivedSpan {
  traceId: string;
  spanId: string;
  parentSpanId: string | undefined;
  name: string;
  kind: number;
  service: string | undefined;
  attributes: Record<string, unknown>;
  startNs: bigint;
  endNs: bigint;
  status: number;
}

type AnyValue = { stringValue?: string; intValue?: string | number; doubleValue?: number; boolValue?: boolean };
type KeyValue = { key: string; value: AnyValue };
const valueOf = (v: AnyValue): unknown => v.stringValue ?? (v.intValue !== undefined ? Number(v.intValue) : (v.doubleValue ?? v.boolValue));
const attrs = (kvs: KeyValue[] | undefined) => Object.fromEntries((kvs ?? []).map((kv) => [kv.key, valueOf(kv.value)]));

export class OtlpReceiver {
  readonly spans: ReceivedSpan[] = [];
  /** Content types of the exports received. */
  readonly contentTypes: string[] = [];
  private server: Server | undefined;
  url = "";

  async start(): Promise<this> {
    this.server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on("data", (d: Buffer) => chunks.push(d));
      req.on("end", () => {
        if (req.method !== "POST" || req.url !== "/v1/traces") {
          res.writeHead(404).end();
          return;
        }
        this.contentTypes.push(String(req.headers["content-type"]));
        const body = JSON.parse(Buffer.concat(chunks).toString("utf8")) as {
          resourceSpans?: Array<{ resource?: { attributes?: KeyValue[] }; scopeSpans?: Array<{ spans?: Array<Record<string, unknown>> }> }>;
        };
        for (const rs of body.resourceSpans ?? []) {
          const service = attrs(rs.resource?.attributes)["service.name"] as string | undefined;
          for (const ss of rs.scopeSpans ?? []) {
            for (const s of ss.spans ?? []) {
              this.spans.push({
                traceId: String(s.traceId),
                spanId: String(s.spanId),
                parentSpanId: s.parentSpanId ? String(s.parentSpanId) : undefined,
                name: String(s.name),
                kind: Number(s.kind),
                service,
                attributes: attrs(s.attributes as KeyValue[]),
                startNs: BigInt(String(s.startTimeUnixNano)),
                endNs: BigInt(String(s.endTimeUnixNano)),
                status: Number((s.status as { code?: number } | undefined)?.code ?? 0),
              });
            }
          }
        }
        res.writeHead(200, { "content-type": "application/json" }).end("{}");
      });
    });
    await new Promise<void>((r) => this.server!.listen(0, "127.0.0.1", r));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
    return this;
  }

  /** The spans of one trace. */
  trace(traceId: string): ReceivedSpan[] {
    return this.spans.filter((s) => s.traceId === traceId);
  }

  async stop(): Promise<void> {
    await new Promise<void>((r) => (this.server ? this.server.close(() => r()) : r()));
  }
}
