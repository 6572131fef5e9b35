// Server-sent events: parse an upstream byte stream into event payloads as
// the WHATWG spec reads them (lines end with CRLF, LF or CR; data lines join
// with "\n"; comments, `event:`/`id:`/`retry:` and unknown fields are
// dropped: OpenAI-style streams use data only), and format payloads for the
// client. The upstream is untrusted: no line and no event is buffered past
// `maxEventBytes`.
import { UpstreamTooLarge } from "../backends/transport.ts";

export interface SseOptions {
  /** Longest line, and longest data of one event, in bytes (router.maxUpstreamEventBytes). */
  maxEventBytes: number;
  /** Names the upstream in the error ("worker w1"). */
  label?: string;
}

const LF = 0x0a;
const CR = 0x0d;
const COLON = 0x3a;
const SPACE = 0x20;
const DEFAULT_MAX_EVENT_BYTES = 1024 * 1024;

const encoder = new TextEncoder();

/** The chunk as a Buffer without copying (undici's chunks already are): ranges decode without a view each. */
function asBuffer(chunk: Uint8Array | string): Buffer {
  if (typeof chunk === "string") return Buffer.from(chunk, "utf8");
  return Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength);
}

/**
 * Yields each event's data (events without a data line are not events).
 * An event still open when the stream ends is discarded, as the spec says.
 * Throws UpstreamTooLarge when a line or an event's data exceeds the limit.
 */
export async function* parseSse(chunks: AsyncIterable<Uint8Array | string>, opts: Partial<SseOptions> = {}): AsyncGenerator<string> {
  const max = opts.maxEventBytes ?? DEFAULT_MAX_EVENT_BYTES;
  const who = opts.label ?? "upstream";
  // Pieces of a line that began in an earlier chunk (copies: chunks are not ours to keep).
  let pending: Buffer[] = [];
  let pendingBytes = 0;
  let data = "";
  let dataBytes = 0;
  let hasData = false;
  // A CR ended the last chunk: an LF starting the next belongs to it.
  let skipLf = false;
  let atStart = true;
  const tooLarge = (what: string) => new UpstreamTooLarge(`${who} sent an SSE ${what} over the limit of ${max} bytes`, max);

  for await (const raw of chunks) {
    const chunk = asBuffer(raw);
    const n = chunk.length;
    let pos = 0;
    if (skipLf && n > 0) {
      if (chunk[0] === LF) pos = 1;
      skipLf = false;
    }
    // Next LF and CR at or after pos, found once each (-1: none left in this chunk; -2: not looked for yet).
    let lf = -2;
    let cr = -2;
    while (pos < n) {
      if (lf !== -1 && lf < pos) lf = chunk.indexOf(LF, pos);
      if (cr !== -1 && cr < pos) cr = chunk.indexOf(CR, pos);
      const eol = lf === -1 ? cr : cr === -1 ? lf : lf < cr ? lf : cr;
      if (eol === -1) {
        pendingBytes += n - pos;
        if (pendingBytes > max) throw tooLarge("line");
        pending.push(Buffer.from(chunk.subarray(pos)));
        break;
      }
      // The line is buf[start, end); `next` is where the following one starts.
      let buf = chunk;
      let start = pos;
      let end = eol;
      let next = eol + 1;
      if (chunk[eol] === CR) {
        if (next < n) {
          if (chunk[next] === LF) next++;
        } else skipLf = true;
      }
      if (pendingBytes > 0) {
        if (pendingBytes + (eol - pos) > max) throw tooLarge("line");
        pending.push(chunk.subarray(pos, eol));
        buf = Buffer.concat(pending);
        start = 0;
        end = buf.length;
        pending = [];
        pendingBytes = 0;
      } else if (eol - pos > max) throw tooLarge("line");
      pos = next;
      if (atStart) {
        atStart = false;
        if (end - start >= 3 && buf[start] === 0xef && buf[start + 1] === 0xbb && buf[start + 2] === 0xbf) start += 3;
      }

      // One line: blank dispatches, ":" is a comment, otherwise "field[: value]".
      if (start === end) {
        if (hasData) {
          const payload = data;
          data = "";
          dataBytes = 0;
          hasData = false;
          yield payload;
        }
        continue;
      }
      if (buf[start] === COLON) continue;
      // Only `data` matters: the name is exactly those four bytes, then a colon or the end.
      if (end - start < 4 || !(buf[start] === 0x64 && buf[start + 1] === 0x61 && buf[start + 2] === 0x74 && buf[start + 3] === 0x61)) continue;
      let from = start + 4;
      if (from < end) {
        if (buf[from] !== COLON) continue;
        from++;
        if (from < end && buf[from] === SPACE) from++;
      }
      dataBytes += end - from + (hasData ? 1 : 0);
      if (dataBytes > max) throw tooLarge("event");
      // A BOM inside a value is kept (Buffer decoding never strips one).
      const value = from < end ? buf.toString("utf8", from, end) : "";
      data = hasData ? `${data}\n${value}` : value;
      hasData = true;
    }
  }
}

/** One event for the client as text; `payload` must hold no line break (the relay sends JSON it serialised or validated as one line). */
export function sseText(payload: string): string {
  return `data: ${payload}\n\n`;
}

/** One event for the client as bytes. */
export function sseEvent(payload: string): Uint8Array {
  return encoder.encode(sseText(payload));
}

export const SSE_DONE = "[DONE]";
