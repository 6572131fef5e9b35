// The shard link's keepalive watch on real loopback sockets: a peer that
// pings is never taken for gone, a silent one is after the timeout, and a
// large frame still going out to a slow reader hides neither end (each hears
// the other's pings or bytes).
import { createServer, connect, type Server, type Socket } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { watchSilence } from "./link.ts";

const servers: Server[] = [];
const sockets: Socket[] = [];
afterEach(() => {
  for (const s of sockets.splice(0)) s.destroy();
  for (const s of servers.splice(0)) s.close();
});

/** A loopback server whose connections `serve` handles; a client socket connected to it. */
async function pair(serve: (s: Socket) => void): Promise<Socket> {
  const server = createServer((s) => {
    sockets.push(s);
    s.on("error", () => {});
    serve(s);
  });
  servers.push(server);
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const client = connect((server.address() as { port: number }).port, "127.0.0.1");
  sockets.push(client);
  client.on("error", () => {});
  await new Promise<void>((r) => client.once("connect", r));
  return client;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe("watchSilence", () => {
  it("never fires while the peer pings", async () => {
    const client = await pair((s) => {
      const t = setInterval(() => s.write("p"), 75);
      s.on("close", () => clearInterval(t));
    });
    let silent = 0;
    watchSilence(client, 300, () => silent++, () => client.write("p"));
    await sleep(1200);
    expect(silent).toBe(0);
  });

  it("fires once, no sooner than the timeout, when the peer reads but sends nothing", async () => {
    const client = await pair((s) => s.resume());
    const t0 = Date.now();
    const fired: number[] = [];
    watchSilence(client, 300, (ms) => fired.push(ms), () => client.write("p"));
    await sleep(1200);
    expect(fired).toHaveLength(1);
    expect(fired[0]).toBeGreaterThanOrEqual(300);
    expect(Date.now() - t0).toBeGreaterThanOrEqual(300);
  });

  it("both ends watching: a large write still going out to a slow reader hides neither end", async () => {
    let serverSilent = 0;
    const client = await pair((s) => {
      watchSilence(s, 300, () => serverSilent++, () => s.write("p"));
      // Reads a little, then waits: the client's write drains slowly.
      s.on("data", () => {
        s.pause();
        setTimeout(() => s.resume(), 20);
      });
    });
    let clientSilent = 0;
    watchSilence(client, 300, () => clientSilent++, () => client.write("p"));
    client.write(Buffer.alloc(64 << 20));
    await sleep(1200);
    // Still going out: the client heard the server's pings, the server the client's bytes.
    expect(client.writableLength).toBeGreaterThan(0);
    expect(clientSilent).toBe(0);
    expect(serverSilent).toBe(0);
  });
});
