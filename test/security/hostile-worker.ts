// A hostile worker for the security tests: registered and heartbeating like
// a real one, but every answer is whatever the test's handler writes —
// oversized bodies, endless lines, forged headers, crafted SSE bytes.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import type { RegistryStore, WorkerRecord } from "@switchyard/state";

export type HostileHandler = (req: IncomingMessage, res: ServerResponse, body: Record<string, unknown>) => void | Promise<void>;

export class HostileWorker {
  url = "";
  /** Requests received, and bytes of answer written so far (all requests). */
  requests = 0;
  bytesWritten = 0;
  private server: Server | undefined;
  private beat: NodeJS.Timeout | undefined;
  private readonly startedAt = Date.now();

  constructor(
    readonly id: string,
    private readonly registry: RegistryStore,
    private readonly handler: HostileHandler,
    readonly models: string[] = ["m"],
  ) {}

  async start(): Promise<this> {
    this.server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on("data", (c: Buffer) => chunks.push(c));
      req.on("end", () => {
        this.requests++;
        let body: Record<string, unknown> = {};
        try {
          body = JSON.parse(Buffer.concat(chunks).toString("utf8")) as Record<string, unknown>;
        } catch {
          // the handler decides
        }
        void Promise.resolve(this.handler(req, res, body)).catch(() => res.destroy());
      });
    });
    await new Promise<void>((r) => this.server!.listen(0, "127.0.0.1", r));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
    await this.heartbeat();
    this.beat = setInterval(() => void this.heartbeat(), 500);
    return this;
  }

  record(): WorkerRecord {
    const now = Date.now();
    return { id: this.id, url: this.url, models: this.models, state: "ready", inFlight: 0, queueDepth: 0, capacity: 64, device: "sim", layerRanges: [], prefixes: [], version: "hostile", startedAt: this.startedAt, updatedAt: now };
  }

  private async heartbeat(): Promise<void> {
    await this.registry.publish(this.record(), 3000).catch(() => {});
  }

  async stop(): Promise<void> {
    if (this.beat) clearInterval(this.beat);
    await this.registry.remove(this.id).catch(() => {});
    if (this.server) {
      this.server.closeAllConnections();
      await new Promise<void>((r) => this.server!.close(() => r()));
    }
  }

  /**
   * Writes `total` bytes of `fill` in 1 MiB pieces, waiting for the socket
   * to drain (so nothing is held here), until done or the reader hangs up.
   * Resolves with how many bytes were written.
   */
  async pour(res: ServerResponse, total: number, fill = 0x61): Promise<number> {
    const piece = Buffer.alloc(1024 * 1024, fill);
    let sent = 0;
    while (sent < total && !res.destroyed) {
      const n = Math.min(piece.length, total - sent);
      const ok = res.write(n === piece.length ? piece : piece.subarray(0, n));
      sent += n;
      this.bytesWritten += n;
      if (!ok) {
        await new Promise<void>((r) => {
          const done = () => {
            res.off("drain", done);
            res.off("close", done);
            r();
          };
          res.once("drain", done);
          res.once("close", done);
        });
      }
    }
    return sent;
  }
}

/** An OpenAI chat chunk (the legitimate events of a stream). */
export function chunk(id: string, content: string, finish: string | null = null): Record<string, unknown> {
  return { id, object: "chat.completion.chunk", created: 1, model: "m", choices: [{ index: 0, delta: finish ? {} : { content }, finish_reason: finish, logprobs: null }] };
}

/** Peak growth of this process's RSS while `fn` runs, sampled every 5 ms. */
export async function peakRssGrowth<T>(fn: () => Promise<T>): Promise<{ result: T; growthBytes: number }> {
  (globalThis as { gc?: () => void }).gc?.();
  const before = process.memoryUsage.rss();
  let peak = before;
  const sample = setInterval(() => {
    peak = Math.max(peak, process.memoryUsage.rss());
  }, 5);
  try {
    const result = await fn();
    peak = Math.max(peak, process.memoryUsage.rss());
    if (process.env.SY_TEST_RSS) console.log("rss growth MiB", ((peak - before) / MiB).toFixed(1));
    return { result, growthBytes: peak - before };
  } finally {
    clearInterval(sample);
  }
}

export const MiB = 1024 * 1024;
