// Load generators. Open loop: requests start at a fixed rate whatever the
// answers do (latency percentiles without coordinated omission). Closed loop:
// C clients back to back, for peak throughput.
import { Pool } from "undici";

export interface Target {
  name: string;
  url: string; // origin
  path: string;
  headers: Record<string, string>;
}

export interface Sample {
  ok: boolean;
  ttftMs: number;
  totalMs: number;
  /** Why a sample is not ok (causeOf): its status and the error code its body named, a stream's error event, a socket error. */
  cause?: string;
}

export interface LoadResult {
  samples: Sample[];
  errors: number;
  /** The errors by cause, most frequent first. */
  causes: Record<string, number>;
  wallS: number;
}

/** The errors of `samples` by cause, most frequent first. */
function causesOf(samples: Sample[]): Record<string, number> {
  const n = new Map<string, number>();
  for (const s of samples) if (!s.ok) n.set(s.cause ?? "unknown", (n.get(s.cause ?? "unknown") ?? 0) + 1);
  return Object.fromEntries([...n].sort((a, b) => b[1] - a[1]));
}

/**
 * A load's errors as one line's worth ("HTTP 503 router_overloaded ×700,
 * UND_ERR_SOCKET ×81"), or "" when there were none: a table's error count
 * says how many, this says which — a refusal, a crash and a bench's own
 * socket limit read alike as a count.
 */
export function causesText(causes: Record<string, number>): string {
  return Object.entries(causes)
    .map(([cause, n]) => `${cause} ×${n}`)
    .join(", ");
}

/** The error code an error body names (the router's and OpenAI's `"code"`, Anthropic's `"type"` inside `error`), if any. */
function bodyCode(text: string): string | undefined {
  return /"code"\s*:\s*"([A-Za-z0-9_.-]{1,64})"/.exec(text)?.[1] ?? /"error"\s*:\s*\{[^}]*"type"\s*:\s*"([A-Za-z0-9_.-]{1,64})"/.exec(text)?.[1];
}

/** A chat message as the benches send it. */
export interface BenchMessage {
  role: string;
  content: string;
}

/**
 * The messages of a bench request: one short message, or with `kb` a
 * conversation of user and assistant turns of a few hundred characters
 * each (prose with punctuation, numbers and a quote to escape), as a
 * support chat or an agent's history sends it, until `{"model":"sim",
 * "messages":…}` is about `kb` KB. The same text every call, so runs compare.
 */
export function benchMessages(kb?: number): BenchMessage[] {
  if (!kb) return [{ role: "user", content: "hi" }];
  const words = "the order shipped on 2026-11-30 but the tracking number 1Z999AA10123456784 shows no scan since the depot in Leeds; can you check whether the parcel was \"held for inspection\" and when it will move again".split(" ");
  const messages: BenchMessage[] = [{ role: "system", content: "You are the support assistant of a parcel carrier. Answer briefly and cite the tracking events you used." }];
  // {"model":"sim","messages":[…]} around the messages, a comma between each two.
  let size = JSON.stringify({ model: "sim", messages }).length;
  for (let turn = 0; size < kb * 1024; turn++) {
    const n = 30 + ((turn * 7) % 25);
    const content = Array.from({ length: n }, (_, i) => words[(turn * 11 + i) % words.length]).join(" ");
    const message = { role: turn % 2 === 0 ? "user" : "assistant", content: `${turn + 1}. ${content}.` };
    messages.push(message);
    size += 1 + JSON.stringify(message).length;
  }
  return messages;
}

export function percentile(xs: number[], p: number): number {
  if (xs.length === 0) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1))]!;
}

async function one(pool: Pool, t: Target, body: string, stream: boolean): Promise<Sample> {
  const t0 = performance.now();
  try {
    const res = await pool.request({ path: t.path, method: "POST", headers: { "content-type": "application/json", ...t.headers }, body });
    if (res.statusCode !== 200) {
      // The start of the error body: enough for its code.
      let head = "";
      for await (const chunk of res.body) {
        head += chunk.toString();
        if (head.length > 2048) break;
      }
      const code = bodyCode(head);
      return { ok: false, ttftMs: NaN, totalMs: performance.now() - t0, cause: `HTTP ${res.statusCode}${code ? ` ${code}` : ""}` };
    }
    let ttft = NaN;
    let text = "";
    for await (const chunk of res.body) {
      if (Number.isNaN(ttft)) {
        const s = chunk.toString();
        // The first data event, not a keep-alive comment.
        if (!stream || s.includes("data:")) ttft = performance.now() - t0;
        text += s;
      } else if (stream) text = (text + chunk.toString()).slice(-200);
    }
    const total = performance.now() - t0;
    const ok = stream ? text.includes("[DONE]") && !text.includes('"error"') : text.length > 0;
    if (ok) return { ok, ttftMs: Number.isNaN(ttft) ? total : ttft, totalMs: total };
    const failed = stream && text.includes('"error"');
    const code = failed ? bodyCode(text) : undefined;
    const cause = failed ? `error event${code ? ` ${code}` : ""}` : stream ? "stream without [DONE]" : "empty body";
    return { ok, ttftMs: Number.isNaN(ttft) ? total : ttft, totalMs: total, cause };
  } catch (err) {
    const e = err as { code?: unknown; name?: unknown };
    return { ok: false, ttftMs: NaN, totalMs: performance.now() - t0, cause: typeof e?.code === "string" ? e.code : typeof e?.name === "string" ? e.name : "thrown" };
  }
}

export async function openLoop(t: Target, opts: { ratePerS: number; durationS: number; body: string; stream: boolean }): Promise<LoadResult> {
  const pool = new Pool(t.url, { connections: 4096, pipelining: 1, headersTimeout: 60_000, bodyTimeout: 60_000 });
  const n = Math.max(1, Math.round(opts.ratePerS * opts.durationS));
  const interval = 1000 / opts.ratePerS;
  const inflight: Promise<Sample>[] = [];
  const start = performance.now();
  for (let i = 0; i < n; i++) {
    const due = start + i * interval;
    const wait = due - performance.now();
    if (wait > 1) await new Promise((r) => setTimeout(r, wait));
    inflight.push(one(pool, t, opts.body, opts.stream));
  }
  const samples = await Promise.all(inflight);
  const wallS = (performance.now() - start) / 1000;
  await pool.close();
  return { samples, errors: samples.filter((s) => !s.ok).length, causes: causesOf(samples), wallS };
}

export async function closedLoop(t: Target, opts: { clients: number; durationS: number; body: string; stream: boolean }): Promise<LoadResult> {
  const pool = new Pool(t.url, { connections: opts.clients, pipelining: 1 });
  const samples: Sample[] = [];
  const start = performance.now();
  const end = start + opts.durationS * 1000;
  await Promise.all(
    Array.from({ length: opts.clients }, async () => {
      while (performance.now() < end) samples.push(await one(pool, t, opts.body, opts.stream));
    }),
  );
  const wallS = (performance.now() - start) / 1000;
  await pool.close();
  return { samples, errors: samples.filter((s) => !s.ok).length, causes: causesOf(samples), wallS };
}
