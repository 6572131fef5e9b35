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
// A BOM is stripped once, at the start of the stream, not from every value.
const decoder = new TextDecoder("utf-8", { ignoreBOM: true });

/** Whether `line` is the field name "data" followed by a colon or nothing. */
function isDataField(line: Uint8Array, nameEnd: number): boolean {
  return nameEnd === 4 && line[0] === 0x64 && line[1] === 0x61 && line[2] === 0x74 && line[3] === 0x61;
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
  let pending: Uint8Array[] = [];
  let pendingBytes = 0;
  let data = "";
  let dataBytes = 0;
  let hasData = false;
  // A CR ended the last chunk: an LF starting the next belongs to it.
  let skipLf = false;
  let atStart = true;
  const tooLarge = (what: string) => new UpstreamTooLarge(`${who} sent an SSE ${what} over the limit of ${max} bytes`, max);

  for await (const raw of chunks) {
    const chunk = typeof raw === "string" ? encoder.encode(raw) : raw;
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
      const end = lf === -1 ? cr : cr === -1 ? lf : lf < cr ? lf : cr;
      if (end === -1) {
        pendingBytes += n - pos;
        if (pendingBytes > max) throw tooLarge("line");
        pending.push(new Uint8Array(chunk.subarray(pos)));
        break;
      }
      let line: Uint8Array;
      if (pendingBytes > 0) {
        const total = pendingBytes + (end - pos);
        if (total > max) throw tooLarge("line");
        line = new Uint8Array(total);
        let at = 0;
        for (const p of pending) {
          line.set(p, at);
          at += p.length;
        }
        line.set(chunk.subarray(pos, end), at);
        pending = [];
        pendingBytes = 0;
      } else {
        if (end - pos > max) throw tooLarge("line");
        line = chunk.subarray(pos, end);
      }
      pos = end + 1;
      if (chunk[end] === CR) {
        if (pos < n) {
          if (chunk[pos] === LF) pos++;
        } else skipLf = true;
      }
      if (atStart) {
        atStart = false;
        if (line[0] === 0xef && line[1] === 0xbb && line[2] === 0xbf) line = line.subarray(3);
      }

      // One line: blank dispatches, ":" is a comment, otherwise "field[: value]".
      if (line.length === 0) {
        if (hasData) {
          const payload = data;
          data = "";
          dataBytes = 0;
          hasData = false;
          yield payload;
        }
        continue;
      }
      if (line[0] === COLON) continue;
      let colon = line.indexOf(COLON);
      if (colon === -1) colon = line.length;
      if (!isDataField(line, colon)) continue;
      let from = colon + 1;
      if (from < line.length && line[from] === SPACE) from++;
      const valueBytes = Math.max(0, line.length - from);
      dataBytes += valueBytes + (hasData ? 1 : 0);
      if (dataBytes > max) throw tooLarge("event");
      const value = valueBytes > 0 ? decoder.decode(line.subarray(from)) : "";
      data = hasData ? `${data}\n${value}` : value;
      hasData = true;
    }
  }
}

/** One event for the client; `payload` must hold no line break (the relay sends JSON it serialised or validated as one line). */
export function sseEvent(payload: string): Uint8Array {
  return encoder.encode(`data: ${payload}\n\n`);
}

export const SSE_DONE = "[DONE]";
