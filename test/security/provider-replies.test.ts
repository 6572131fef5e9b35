// The paid backends read through the same bounded readers and SSE parser as
// workers: an oversized body, SSE line or error body from OpenRouter or
// Anthropic (or anything posing as them at their base URL) is refused at
// the limit, not buffered.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { AnthropicBackend, AnthropicConnections } from "../../apps/router/src/backends/anthropic/client.ts";
import { OpenRouterBackend, OpenRouterConnections } from "../../apps/router/src/backends/openrouter/client.ts";
import { UpstreamTooLarge } from "../../apps/router/src/backends/transport.ts";
import type { Backend, BackendRequest } from "../../apps/router/src/backends/types.ts";
import type { RelayContext } from "../../apps/router/src/relay/context.ts";
import { MiB } from "./hostile-worker.ts";

type Reply = (req: IncomingMessage, res: ServerResponse) => void;
let reply: Reply = (_req, res) => res.end();
let written = 0;
let server: Server;
let url = "";

beforeAll(async () => {
  server = createServer((req, res) => {
    req.resume();
    req.on("end", () => reply(req, res));
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

afterAll(async () => {
  server.closeAllConnections();
  await new Promise<void>((r) => server.close(() => r()));
});

/** Writes `total` bytes of "a" with backpressure until done or the reader hangs up. */
async function pour(res: ServerResponse, total: number): Promise<void> {
  const piece = Buffer.alloc(MiB, 0x61);
  for (let sent = 0; sent < total && !res.destroyed; sent += piece.length) {
    written += piece.length;
    if (!res.write(piece)) await new Promise<void>((r) => (res.once("drain", r), res.once("close", r)));
  }
  res.end();
}

const limits = { maxBodyBytes: 2 * MiB, maxEventBytes: 64 * 1024 };
const ctx = { requestId: "req-provider-limits" } as RelayContext;
const chatReq = (stream: boolean): BackendRequest => ({ path: "/v1/chat/completions", stream, body: { model: "x", stream, messages: [{ role: "user", content: "hi" }] } });

const backends: Array<[string, () => { backend: Backend; close(): Promise<void> }]> = [
  [
    "openrouter",
    () => {
      const c = new OpenRouterConnections({ baseUrl: url, apiKey: "sk-or-v1-test", connectTimeoutMs: 1_000, limits });
      return { backend: new OpenRouterBackend("openai/gpt-4o-mini", c), close: () => c.close() };
    },
  ],
  [
    "anthropic",
    () => {
      const c = new AnthropicConnections({ baseUrl: url, apiKey: "sk-ant-test", version: "2023-06-01", defaultMaxTokens: 64, connectTimeoutMs: 1_000, limits });
      return { backend: new AnthropicBackend("claude-3-5-haiku-latest", c), close: () => c.close() };
    },
  ],
];

describe.each(backends)("%s answers are bounded", (_name, make) => {
  it("a 300 MiB body is refused at maxBodyBytes", async () => {
    written = 0;
    reply = (_req, res) => {
      res.writeHead(200, { "content-type": "application/json" });
      void pour(res, 300 * MiB);
    };
    const { backend, close } = make();
    try {
      const up = await backend.open(chatReq(false), ctx, new AbortController().signal);
      await expect(up.text()).rejects.toThrow(UpstreamTooLarge);
      expect(written).toBeLessThan(64 * MiB);
    } finally {
      await close();
    }
  });

  it("a newline-free SSE line is refused at maxEventBytes", async () => {
    written = 0;
    reply = (_req, res) => {
      res.writeHead(200, { "content-type": "text/event-stream" });
      res.write("data: ");
      void pour(res, 300 * MiB);
    };
    const { backend, close } = make();
    try {
      const up = await backend.open(chatReq(true), ctx, new AbortController().signal);
      await expect(
        (async () => {
          for await (const p of up.events()) void p;
        })(),
      ).rejects.toThrow(/SSE line over the limit of 65536 bytes/);
      expect(written).toBeLessThan(64 * MiB);
    } finally {
      await close();
    }
  });

  it("a 300 MiB error body costs its first 64 KiB only", async () => {
    written = 0;
    reply = (_req, res) => {
      res.writeHead(500, { "content-type": "application/json" });
      void pour(res, 300 * MiB);
    };
    const { backend, close } = make();
    try {
      await expect(backend.open(chatReq(false), ctx, new AbortController().signal)).rejects.toMatchObject({ kind: "bad_status", status: 500 });
      expect(written).toBeLessThan(64 * MiB);
    } finally {
      await close();
    }
  });
});
