import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { Client } from "undici";
import { describe, expect, it } from "vitest";
import { Abort, onAbort } from "./abort.ts";

describe("Abort", () => {
  it("calls each listener still waiting once, in order, with the reason set before; an undone one is not called", () => {
    const a = new Abort();
    const seen: string[] = [];
    const offFirst = onAbort(a, () => seen.push("first"));
    onAbort(a, () => seen.push(`second:${String(a.reason)}`));
    a.once("abort", () => seen.push(`third:${a.aborted}`));
    offFirst();
    expect(a.listenerCount("abort")).toBe(2);
    a.abort("gone");
    a.abort("again");
    expect(seen).toEqual(["second:gone", "third:true"]);
    expect(a.reason).toBe("gone");
    expect(a.listenerCount("abort")).toBe(0);
    // After the abort nothing waits: a listener added now is never called (callers check `aborted` first).
    onAbort(a, () => seen.push("late"));
    expect(a.listenerCount("abort")).toBe(0);
  });

  it("removes one registration of a listener added twice", () => {
    const a = new Abort();
    let n = 0;
    const fn = () => n++;
    a.on("abort", fn);
    a.on("abort", fn);
    a.removeListener("abort", fn);
    a.abort();
    expect(n).toBe(1);
  });

  it("is taken by undici as a request's signal: aborting it ends the request with the reason, and a finished request leaves no listener", async () => {
    const server = createServer((req, res) => {
      if (req.url === "/slow") return; // never answers
      res.end("ok");
    });
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    const client = new Client(`http://127.0.0.1:${(server.address() as AddressInfo).port}`);
    try {
      const done = new Abort();
      const ok = await client.request({ path: "/", method: "GET", signal: done });
      expect(await ok.body.text()).toBe("ok");
      await new Promise((r) => setImmediate(r)); // undici lets go of the signal when the body closes, a tick after its end
      expect(done.listenerCount("abort")).toBe(0);

      const a = new Abort();
      const pending = client.request({ path: "/slow", method: "GET", signal: a });
      setTimeout(() => a.abort(new Error("client went away")), 20);
      await expect(pending).rejects.toThrow("client went away");
    } finally {
      await client.destroy();
      server.closeAllConnections();
      await new Promise<void>((r) => server.close(() => r()));
    }
  });
});
