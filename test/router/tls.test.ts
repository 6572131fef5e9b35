// HTTPS when a certificate and key are configured.
import { execFileSync } from "node:child_process";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { Agent, fetch as undiciFetch } from "undici";
import { describe, expect, it } from "vitest";
import { startTestRouter } from "../helpers/router.ts";

describe("TLS", () => {
  it("serves HTTPS with the configured certificate", async () => {
    const dir = mkdtempSync(path.join(tmpdir(), "sy-tls-"));
    const certFile = path.join(dir, "cert.pem");
    const keyFile = path.join(dir, "key.pem");
    execFileSync("openssl", ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", keyFile, "-out", certFile, "-days", "1", "-subj", "/CN=127.0.0.1"], { stdio: "ignore" });
    const fx = await startTestRouter({ "router.tls": { certFile, keyFile } });
    try {
      expect(fx.router.url).toMatch(/^https:\/\//);
      const dispatcher = new Agent({ connect: { rejectUnauthorized: false } });
      const res = await undiciFetch(`${fx.router.url}/v1/models`, { headers: { authorization: `Bearer ${fx.key}` }, dispatcher });
      expect(res.status).toBe(200);
      expect(((await res.json()) as { object: string }).object).toBe("list");
      await expect(fetch(fx.router.url.replace("https:", "http:") + "/healthz")).rejects.toThrow();
    } finally {
      await fx.close();
    }
  });
});
