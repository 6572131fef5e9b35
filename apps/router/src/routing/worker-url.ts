// Worker URLs are where a router sends tenants' prompts, with the worker's
// secret: a record must not make the router call internal endpoints (SSRF).
// Checked on read, in the directory refresh (off the request path), on the
// URL and on every address its host resolves to: http(s) only, never link-
// local, cloud metadata, unspecified or multicast addresses, never the
// router's own listeners nor its Redis or Postgres, and — when the operator
// names them — only inside the allowed worker networks.
import { lookup } from "node:dns/promises";
import { isIP } from "node:net";
import { networkInterfaces } from "node:os";

export type UrlVerdict = { ok: true } | { ok: false; reason: string } | { ok: "pending" };

/** An address as bytes: 4 (IPv4) or 16 (IPv6). */
type Bytes = Uint8Array;

export interface Cidr {
  bytes: Bytes;
  prefix: number;
}

function ipv4Bytes(s: string): Bytes | undefined {
  if (isIP(s) !== 4) return undefined;
  return Uint8Array.from(s.split(".").map(Number));
}

function ipv6Bytes(s: string): Bytes | undefined {
  const text = s.replace(/^\[|\]$/g, "").replace(/%.*$/, "");
  if (isIP(text) !== 6) return undefined;
  let head = text;
  const out = new Uint8Array(16);
  // A dotted tail (::ffff:1.2.3.4) is the last 32 bits.
  const dotted = /(\d+\.\d+\.\d+\.\d+)$/.exec(head);
  let tail: number[] = [];
  if (dotted) {
    const v4 = ipv4Bytes(dotted[1]!)!;
    tail = [(v4[0]! << 8) | v4[1]!, (v4[2]! << 8) | v4[3]!];
    head = head.slice(0, -dotted[1]!.length);
    if (head.endsWith(":") && !head.endsWith("::")) head = head.slice(0, -1);
  }
  const [left, right] = head.includes("::") ? head.split("::") : [head, undefined];
  const groups = (p: string | undefined) => (p ? p.split(":").filter((g) => g !== "").map((g) => parseInt(g, 16)) : []);
  const l = groups(left);
  const r = [...groups(right), ...tail];
  const words = right === undefined && !head.includes("::") ? [...l, ...tail] : [...l, ...new Array(8 - l.length - r.length).fill(0), ...r];
  if (words.length !== 8) return undefined;
  words.forEach((w, i) => {
    out[i * 2] = w >> 8;
    out[i * 2 + 1] = w & 255;
  });
  return out;
}

function bytesOf(address: string): Bytes | undefined {
  return ipv4Bytes(address) ?? ipv6Bytes(address);
}

/** The IPv4 address an IPv6 one carries and reaches (mapped, compatible, NAT64, 6to4), if any. */
function embeddedIpv4(b: Bytes): Bytes | undefined {
  if (b.length !== 16) return undefined;
  const zero = (from: number, to: number) => b.subarray(from, to).every((x) => x === 0);
  if (zero(0, 10) && b[10] === 0xff && b[11] === 0xff) return b.slice(12); // ::ffff:a.b.c.d
  if (zero(0, 12) && !(zero(12, 15) && (b[15] === 0 || b[15] === 1))) return b.slice(12); // ::a.b.c.d (deprecated)
  if (b[0] === 0x00 && b[1] === 0x64 && b[2] === 0xff && b[3] === 0x9b && zero(4, 12)) return b.slice(12); // 64:ff9b::/96
  if (b[0] === 0x20 && b[1] === 0x02) return b.slice(2, 6); // 2002::/16
  return undefined;
}

export function parseCidr(text: string): Cidr | undefined {
  const m = /^([^/]+)\/(\d{1,3})$/.exec(text.trim());
  const bytes = m ? bytesOf(m[1]!) : bytesOf(text.trim());
  if (!bytes) return undefined;
  const prefix = m ? Number(m[2]) : bytes.length * 8;
  if (prefix > bytes.length * 8) return undefined;
  return { bytes, prefix };
}

function inCidr(b: Bytes, c: Cidr): boolean {
  if (b.length !== c.bytes.length) return false;
  let bits = c.prefix;
  for (let i = 0; bits > 0; i++, bits -= 8) {
    const mask = bits >= 8 ? 0xff : (0xff << (8 - bits)) & 0xff;
    if ((b[i]! & mask) !== (c.bytes[i]! & mask)) return false;
  }
  return true;
}

/** Never a worker: why, per range. */
const refused: Array<[Cidr, string]> = (
  [
    ["0.0.0.0/8", "unspecified ('this network')"],
    ["169.254.0.0/16", "link-local, where cloud metadata lives"],
    ["100.100.100.200/32", "a cloud metadata endpoint"],
    ["224.0.0.0/4", "multicast"],
    ["240.0.0.0/4", "reserved or broadcast"],
    ["::/128", "unspecified"],
    ["fe80::/10", "IPv6 link-local"],
    ["ff00::/8", "IPv6 multicast"],
    ["fd00:ec2::254/128", "the EC2 metadata endpoint"],
  ] as const
).map(([c, why]) => [parseCidr(c)!, why]);

const metadataHosts = new Set(["metadata", "metadata.google.internal", "metadata.goog", "metadata.azure.com", "instance-data", "instance-data.ec2.internal", "metadata.tencentyun.com"]);

const loopback = [parseCidr("127.0.0.0/8")!, parseCidr("::1/128")!];

/** This machine's addresses (loopback, interfaces, unspecified). */
function isLocal(b: Bytes, interfaces: Bytes[]): boolean {
  if (loopback.some((c) => inCidr(b, c)) || b.every((x) => x === 0)) return true;
  return interfaces.some((i) => i.length === b.length && i.every((x, k) => x === b[k]));
}

/** The host a URL names, as the policy keys it (lower case, no brackets, no trailing dot). */
export function hostOf(raw: string): string | undefined {
  try {
    return new URL(raw).hostname.replace(/^\[|\]$/g, "").toLowerCase().replace(/\.$/, "");
  } catch {
    return undefined;
  }
}

export interface WorkerUrlPolicyOptions {
  /** CIDRs worker addresses must fall in (every resolved address); empty: anywhere not refused. */
  allowedNetworks?: string[];
  /** Host name → addresses (default: dns.lookup, all families). */
  resolve?: (host: string) => Promise<string[]>;
  /** How long a resolution is trusted (a failed one: a fifth of it). */
  cacheMs?: number;
  /** How long a check waits for DNS before answering "pending" (the record is then not routable yet). */
  waitMs?: number;
  now?: () => number;
}

interface Resolution {
  addresses?: string[];
  error?: string;
  expiresAt: number;
  pending?: Promise<void>;
}

interface OwnEndpoint {
  what: string;
  port: number;
  /** Addresses the endpoint's host resolved to; `local`: it is this machine (any local address). */
  addresses: Bytes[];
  local: boolean;
  host: string;
}

const defaultResolve = async (host: string) => (await lookup(host, { all: true, verbatim: true })).map((a) => a.address);

export class WorkerUrlPolicy {
  private readonly allowed: Cidr[];
  private readonly resolveHost: (host: string) => Promise<string[]>;
  private readonly cacheMs: number;
  private readonly waitMs: number;
  private readonly now: () => number;
  private readonly cache = new Map<string, Resolution>();
  /** Host → the addresses its last passing check saw (what worker connections may reach). */
  private readonly approved = new Map<string, string[]>();
  private readonly own: OwnEndpoint[] = [];
  private readonly interfaces: Bytes[];

  constructor(opts: WorkerUrlPolicyOptions = {}) {
    this.allowed = (opts.allowedNetworks ?? []).map((c) => {
      const parsed = parseCidr(c);
      if (!parsed) throw new Error(`workers.allowedNetworks: '${c}' is not a CIDR`);
      return parsed;
    });
    this.resolveHost = opts.resolve ?? defaultResolve;
    this.cacheMs = opts.cacheMs ?? 30_000;
    this.waitMs = opts.waitMs ?? 500;
    this.now = opts.now ?? Date.now;
    this.interfaces = Object.values(networkInterfaces())
      .flatMap((l) => l ?? [])
      .map((a) => bytesOf(a.address))
      .filter((b): b is Bytes => b !== undefined);
  }

  /** One of the router's own addresses (`what`: e.g. "this router's admin listener"); a worker URL never points at it. */
  async addOwnEndpoint(what: string, host: string, port: number): Promise<void> {
    const name = host.replace(/^\[|\]$/g, "").toLowerCase();
    let addresses: Bytes[] = [];
    const literal = bytesOf(name);
    if (literal) addresses = [literal];
    else {
      try {
        addresses = (await this.resolveHost(name)).map(bytesOf).filter((b): b is Bytes => b !== undefined);
      } catch {
        addresses = [];
      }
    }
    const local = name === "localhost" || addresses.some((b) => isLocal(b, this.interfaces));
    this.own.push({ what, host: name, port, addresses, local });
  }

  /** The verdict on one worker URL; waits at most waitMs for DNS. */
  async check(raw: string): Promise<UrlVerdict> {
    let url: URL;
    try {
      url = new URL(raw);
    } catch {
      return { ok: false, reason: "not a URL" };
    }
    if (url.protocol !== "http:" && url.protocol !== "https:") return { ok: false, reason: `scheme ${url.protocol} (only http and https)` };
    if (url.username || url.password) return { ok: false, reason: "the URL carries credentials" };
    const host = hostOf(raw);
    if (!host) return { ok: false, reason: "no host" };
    if (metadataHosts.has(host)) return { ok: false, reason: `${host} is a cloud metadata endpoint` };
    const port = Number(url.port || (url.protocol === "https:" ? 443 : 80));
    let addresses: string[];
    if (isIP(host)) addresses = [host];
    else {
      const r = await this.resolved(host);
      if (r === "pending") return { ok: "pending" };
      if (r.error !== undefined) return { ok: false, reason: `${host} does not resolve (${r.error})` };
      addresses = r.addresses!;
      if (addresses.length === 0) return { ok: false, reason: `${host} resolves to no address` };
    }
    for (const a of addresses) {
      const why = this.refusal(a, port, host);
      if (why) {
        this.approved.delete(host);
        return { ok: false, reason: why };
      }
    }
    if (!isIP(host)) this.approved.set(host, addresses);
    return { ok: true };
  }

  /**
   * A net.connect `lookup` for worker connections: answers with the
   * addresses the last check approved for the host, never a fresh
   * resolution, so a name that re-resolves somewhere else after the check
   * (DNS rebinding) is not followed.
   */
  readonly pinnedLookup = (hostname: string, options: { all?: boolean; family?: number | string }, callback: (...args: unknown[]) => void): void => {
    const host = hostname.replace(/^\[|\]$/g, "").toLowerCase().replace(/\.$/, "");
    const addresses = (this.approved.get(host) ?? []).filter((a) => !options.family || String(options.family).endsWith(String(isIP(a))));
    if (addresses.length === 0) {
      callback(Object.assign(new Error(`${hostname}: no address approved for worker connections`), { code: "ENOTFOUND", hostname }));
      return;
    }
    if (options.all) callback(null, addresses.map((address) => ({ address, family: isIP(address) })));
    else callback(null, addresses[0], isIP(addresses[0]!));
  };

  private refusal(address: string, port: number, host: string): string | undefined {
    const b = bytesOf(address);
    if (!b) return `${address} is not an address`;
    const v4 = embeddedIpv4(b);
    const shown = host === address ? address : `${host} (${address})`;
    for (const form of v4 ? [b, v4] : [b]) {
      for (const [c, why] of refused) if (inCidr(form, c)) return `${shown} is ${why}`;
    }
    // The allow-list judges the address actually reached (the IPv4 one inside a mapped IPv6).
    const reached = v4 ?? b;
    if (this.allowed.length > 0 && !this.allowed.some((c) => inCidr(reached, c) || inCidr(b, c))) return `${shown} is outside workers.allowedNetworks`;
    for (const e of this.own) {
      if (e.port !== port) continue;
      const same = e.addresses.some((o) => (o.length === reached.length && o.every((x, k) => x === reached[k])) || (o.length === b.length && o.every((x, k) => x === b[k])));
      if (same || (e.local && isLocal(reached, this.interfaces)) || e.host === host) return `${shown}:${port} is ${e.what}`;
    }
    return undefined;
  }

  /** Cached resolution (stale entries are used while a fresh lookup runs). */
  private async resolved(host: string): Promise<Resolution | "pending"> {
    const now = this.now();
    let r = this.cache.get(host);
    if (!r || (r.expiresAt <= now && !r.pending)) {
      const entry: Resolution = r ?? { expiresAt: 0 };
      entry.pending = this.resolveHost(host).then(
        (addresses) => {
          entry.addresses = addresses;
          entry.error = undefined;
          entry.expiresAt = this.now() + this.cacheMs;
        },
        (err: unknown) => {
          entry.addresses = undefined;
          entry.error = (err as NodeJS.ErrnoException).code ?? (err as Error).message;
          entry.expiresAt = this.now() + Math.max(1, Math.floor(this.cacheMs / 5));
        },
      );
      void entry.pending.finally(() => (entry.pending = undefined));
      this.cache.set(host, entry);
      r = entry;
    }
    if (r.addresses !== undefined || r.error !== undefined) return r; // fresh, or stale while refreshing
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([r.pending, new Promise<void>((res) => (timer = setTimeout(res, this.waitMs)))]);
    clearTimeout(timer);
    return r.addresses !== undefined || r.error !== undefined ? r : "pending";
  }

  /** Forget resolutions not used by any of `hosts` (the directory calls it with the live workers' hosts). */
  retainHosts(hosts: Set<string>): void {
    for (const h of this.cache.keys()) if (!hosts.has(h)) this.cache.delete(h);
    for (const h of this.approved.keys()) if (!hosts.has(h)) this.approved.delete(h);
  }
}
