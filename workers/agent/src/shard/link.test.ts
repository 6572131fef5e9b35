// The shard link's keepalive watch on real loopback sockets: a peer that
// pings is never taken for gone, a silent one is after the timeout, and a
// large frame still going out to a slow reader hides neither end (each hears
// the other's pings or bytes). And a lazy link's `existing()` (what CLOSE
// frames go over) never opens a connection: not before the first, not after
// the peer's went.
import { createServer, connect, type Server, type Socket } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { LazyShardLink, SHARD_PROTOCOL, watchSilence } from "./link.ts";

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

describe("LazyShardLink.existing", () => {
  it("returns the live link only, and never connects: not before the first get, not after the peer closed it", async () => {
    const conns: Socket[] = [];
    // Just enough of a shard: it accepts the upgrade, then says nothing.
    const server = createServer((s) => {
      conns.push(s);
      sockets.push(s);
      s.on("error", () => {});
      s.once("data", () => s.write(`HTTP/1.1 101 Switching Protocols\r\nupgrade: ${SHARD_PROTOCOL}\r\nconnection: Upgrade\r\n\r\n`));
    });
    servers.push(server);
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    const lazy = new LazyShardLink({ url: `http://127.0.0.1:${(server.address() as { port: number }).port}`, token: "t" }, undefined, 0);
    expect(await lazy.existing()).toBeUndefined();
    await sleep(100);
    expect(conns).toHaveLength(0);
    const link = await lazy.get();
    expect(await lazy.existing()).toBe(link);
    expect(conns).toHaveLength(1);
    // The peer hangs up (as a shard gone, or one dropped by the keepalive).
    conns[0]!.destroy();
    for (let i = 0; i < 100 && link.alive; i++) await sleep(10);
    expect(link.alive).toBe(false);
    expect(await lazy.existing()).toBeUndefined();
    await sleep(100);
    expect(conns).toHaveLength(1);
    // get() is what reconnects.
    expect((await lazy.get()).alive).toBe(true);
    expect(conns).toHaveLength(2);
    await lazy.close();
  });
});
