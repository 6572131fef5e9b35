// The floor: a bare Node pass-through proxy (no auth, no parsing, no
// routing) from PORT to UPSTREAM, streaming bodies both ways.
import { createServer } from "node:http";
import { Pool } from "undici";

const upstream = new Pool(process.env.UPSTREAM!, { connections: 4096, pipelining: 1, headersTimeout: 0, bodyTimeout: 0 });
const server = createServer(async (req, res) => {
  try {
    const up = await upstream.request({
      path: req.url ?? "/",
      method: (req.method ?? "POST") as "POST",
      headers: { "content-type": req.headers["content-type"] ?? "application/json" },
      body: req,
    });
    res.writeHead(up.statusCode, { "content-type": String(up.headers["content-type"] ?? "application/json") });
    for await (const chunk of up.body) res.write(chunk);
    res.end();
  } catch {
    res.destroy();
  }
});
server.keepAliveTimeout = 60_000;
// The router's listen backlog (router.listenBacklog), so past capacity both
// floors hold a burst of new connections alike, instead of dropping SYNs.
server.listen({ port: Number(process.env.PORT), host: "127.0.0.1", backlog: 4096 });
process.on("SIGTERM", () => process.exit(0));
