// Advertised URLs are where routers will send traffic (with the worker's
// secret): refuse link-local and cloud metadata addresses, which would turn a
// worker record into a way to make routers call internal endpoints.
import { isIP } from "node:net";

const metadataHosts = new Set(["metadata", "metadata.google.internal", "metadata.azure.com", "instance-data", "instance-data.ec2.internal"]);

export function checkAdvertiseUrl(raw: string): { ok: true; url: URL } | { ok: false; reason: string } {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    return { ok: false, reason: `'${raw}' is not a URL` };
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") return { ok: false, reason: `advertised URL must be http(s), got ${url.protocol}` };
  if (url.username || url.password) return { ok: false, reason: "advertised URL must not carry credentials" };
  const host = url.hostname.replace(/^\[|\]$/g, "").toLowerCase();
  if (metadataHosts.has(host)) return { ok: false, reason: `${host} is a cloud metadata endpoint` };
  if (isIP(host) === 4) {
    const [a, b] = host.split(".").map(Number) as [number, number];
    if (a === 169 && b === 254) return { ok: false, reason: `${host} is link-local (169.254.0.0/16, where cloud metadata lives)` };
    if (a === 0) return { ok: false, reason: `${host} is not routable` };
    if (a >= 224) return { ok: false, reason: `${host} is multicast or reserved` };
  }
  if (isIP(host) === 6) {
    if (/^fe[89ab]/.test(host)) return { ok: false, reason: `${host} is IPv6 link-local` };
    if (host === "::" || host.startsWith("ff")) return { ok: false, reason: `${host} is not a unicast address` };
    if (host.startsWith("fd00:ec2::")) return { ok: false, reason: `${host} is the EC2 metadata endpoint` };
    // IPv4-mapped addresses (the URL parser writes them as hex groups).
    const dotted = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/.exec(host)?.[1];
    const hex = /^::ffff:([0-9a-f]{1,4}):([0-9a-f]{1,4})$/.exec(host);
    const v4 = dotted ?? (hex ? [parseInt(hex[1]!, 16) >> 8, parseInt(hex[1]!, 16) & 255, parseInt(hex[2]!, 16) >> 8, parseInt(hex[2]!, 16) & 255].join(".") : undefined);
    if (v4) return checkAdvertiseUrl(`${url.protocol}//${v4}:${url.port || 80}`);
  }
  return { ok: true, url };
}
