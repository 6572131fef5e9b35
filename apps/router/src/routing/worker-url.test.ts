// The router's check of worker URLs (SSRF): schemes, refused ranges in every
// spelling, resolved addresses, the allow-list, the router's own endpoints,
// and DNS kept off the request path (bounded wait, cached).
import { createServer } from "node:http";
import type { AddressInfo, LookupFunction } from "node:net";
import { describe, expect, it } from "vitest";
import { WorkerConnections } from "../backends/worker/client.ts";
import { parseCidr, WorkerUrlPolicy } from "./worker-url.ts";

const dns = (table: Record<string, string[]>) => async (host: string) => {
  const a = table[host];
  if (!a) throw Object.assign(new Error("not found"), { code: "ENOTFOUND" });
  return a;
};

describe("WorkerUrlPolicy", () => {
  it("refuses non-http schemes, credentials, metadata hosts and refused ranges in any spelling", async () => {
    const p = new WorkerUrlPolicy({ resolve: dns({}) });
    for (const bad of [
      "file:///etc/passwd",
      "gopher://10.0.0.5:70/_x",
      "ftp://10.0.0.5/",
      "http://user:pw@10.0.0.5:9100",
      "http://169.254.169.254/latest/meta-data/",
      "http://2852039166/", // decimal
      "http://0xa9fea9fe/", // hex
      "http://0251.0376.0251.0376/", // octal
      "http://169.254.43518/", // a.b.c16
      "http://[::ffff:169.254.169.254]/",
      "http://[::ffff:a9fe:a9fe]/",
      "http://[64:ff9b::a9fe:a9fe]/",
      "http://[2002:a9fe:a9fe::1]/",
      "http://[::169.254.169.254]/",
      "http://metadata.google.internal/",
      "http://METADATA.GOOGLE.INTERNAL./",
      "http://metadata/",
      "http://100.100.100.200/",
      "http://[fd00:ec2::254]/",
      "http://0.0.0.0:9100",
      "http://0:9100",
      "http://[::]:9100",
      "http://[fe80::1]:9100",
      "http://224.0.0.1/",
      "http://255.255.255.255/",
    ]) {
      const v = await p.check(bad);
      expect(v.ok, bad).toBe(false);
    }
    for (const good of ["http://10.0.0.5:9100", "https://10.1.2.3", "http://127.0.0.1:9100", "http://[::1]:9100", "http://192.168.1.20:9100/base"]) {
      expect(await p.check(good), good).toEqual({ ok: true });
    }
  });

  it("checks what a host name resolves to, not just the string", async () => {
    const p = new WorkerUrlPolicy({ resolve: dns({ "gpu1.example": ["10.0.0.9"], "sneaky.example": ["10.0.0.9", "169.254.169.254"], "mapped.example": ["::ffff:169.254.169.254"] }) });
    expect(await p.check("http://gpu1.example:9100")).toEqual({ ok: true });
    expect(await p.check("http://sneaky.example:9100")).toMatchObject({ ok: false, reason: expect.stringContaining("169.254.169.254") });
    expect(await p.check("http://mapped.example:9100")).toMatchObject({ ok: false });
    expect(await p.check("http://nowhere.example:9100")).toMatchObject({ ok: false, reason: expect.stringContaining("ENOTFOUND") });
  });

  it("with allowedNetworks, every resolved address must be inside them", async () => {
    const p = new WorkerUrlPolicy({ allowedNetworks: ["10.0.0.0/8", "127.0.0.0/8"], resolve: dns({ "mixed.example": ["10.0.0.9", "192.168.0.9"] }) });
    expect(await p.check("http://10.2.3.4:9100")).toEqual({ ok: true });
    expect(await p.check("http://127.0.0.1:9100")).toEqual({ ok: true });
    expect(await p.check("http://[::ffff:10.2.3.4]:9100")).toEqual({ ok: true });
    for (const bad of ["http://192.168.0.9:9100", "http://[::1]:9100", "http://mixed.example:9100", "http://[fd00::5]:9100"]) expect((await p.check(bad)).ok, bad).toBe(false);
    expect(() => new WorkerUrlPolicy({ allowedNetworks: ["10.0.0.0/33"] })).toThrow(/CIDR/);
    expect(parseCidr("fd00::/8")).toBeDefined();
    expect(parseCidr("not-a-cidr")).toBeUndefined();
  });

  it("never points at the router's own listeners, Redis or Postgres", async () => {
    const p = new WorkerUrlPolicy({ resolve: dns({ "redis.internal": ["10.0.0.50"], localhost: ["127.0.0.1", "::1"] }) });
    await p.addOwnEndpoint("this router's admin listener", "0.0.0.0", 9090);
    await p.addOwnEndpoint("this router's Redis", "redis.internal", 6379);
    await p.addOwnEndpoint("this router's Postgres", "127.0.0.1", 5432);
    for (const bad of ["http://127.0.0.1:9090", "http://localhost:9090", "http://[::1]:9090", "http://10.0.0.50:6379", "http://redis.internal:6379", "http://127.0.0.1:5432", "http://localhost:5432", "http://[::ffff:127.0.0.1]:5432"]) {
      expect((await p.check(bad)).ok, bad).toBe(false);
    }
    for (const good of ["http://127.0.0.1:9100", "http://10.0.0.51:6379", "http://10.0.0.50:9100"]) expect(await p.check(good), good).toEqual({ ok: true });
  });

  it("DNS stays off the request path: a slow lookup answers pending, then the cached result", async () => {
    let lookups = 0;
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const p = new WorkerUrlPolicy({
      waitMs: 20,
      resolve: async () => {
        lookups++;
        await gate;
        return ["10.0.0.9"];
      },
    });
    expect(await p.check("http://slow.example:9100")).toEqual({ ok: "pending" });
    expect(await p.check("http://slow.example:9100")).toEqual({ ok: "pending" });
    release();
    await gate;
    expect(await p.check("http://slow.example:9100")).toEqual({ ok: true });
    expect(await p.check("http://slow.example:9100")).toEqual({ ok: true });
    expect(lookups).toBe(1);
  });

  it("worker connections reach only the addresses the check approved (DNS rebinding is not followed)", async () => {
    const server = createServer((_, res) => res.end("ok")).listen(0, "127.0.0.1");
    await new Promise((r) => server.once("listening", r));
    const port = (server.address() as AddressInfo).port;
    let table: Record<string, string[]> = { "gpu.test": ["127.0.0.1"] };
    const p = new WorkerUrlPolicy({ cacheMs: 1, resolve: async (h) => table[h] ?? [] });
    const conns = new WorkerConnections({ connectTimeoutMs: 1000, lookup: p.pinnedLookup as LookupFunction });
    const get = async (origin: string) => {
      const res = await conns.pool(origin).request({ path: "/", method: "GET" });
      return res.body.text();
    };
    try {
      expect(await p.check(`http://gpu.test:${port}`)).toEqual({ ok: true });
      expect(await get(`http://gpu.test:${port}`)).toBe("ok");
      // Never checked: no address to connect to.
      await expect(get(`http://unchecked.test:${port}`)).rejects.toThrow(/no address approved/);
      // The name now points at metadata: the next check refuses it, and a new connection is not made.
      table = { "gpu.test": ["169.254.169.254"] };
      await new Promise((r) => setTimeout(r, 5));
      await p.check(`http://gpu.test:${port}`); // refreshes the stale resolution
      expect(await p.check(`http://gpu.test:${port}`)).toMatchObject({ ok: false });
      await conns.close();
      await expect(get(`http://gpu.test:${port}`)).rejects.toThrow(/no address approved/);
    } finally {
      await conns.close();
      server.close();
    }
  });
});
