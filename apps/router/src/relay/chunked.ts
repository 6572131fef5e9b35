// Writing a stream's pieces to a Node response: once its head is out, each
// piece goes to the socket as one HTTP/1.1 chunk in one write. Node's own
// res.write frames a chunk as four writes (size, CRLF, data, CRLF) under a
// cork released on the next tick, then one writev: per token of every
// stream, a nextTick, four buffered write requests and the writev's arrays
// (issue 14: the Node writable was an eighth of what a stream allocated).
// The bytes on the wire are the same; the response still ends (and frees
// its keep-alive connection) through res.end(), which writes the last chunk.
import type { ServerResponse } from "node:http";
import type { Socket } from "node:net";

/** What a write of a piece says: true when the client can take more now, else a promise of when it can (or went away). */
export type PieceWrite = (piece: Uint8Array | string) => true | Promise<void>;

const CRLF = "\r\n";

/** `res` with the fields of OutgoingMessage this relies on (public since Node 0.x, untyped by @types/node). */
type Outgoing = ServerResponse & { chunkedEncoding?: boolean; outputData?: unknown[]; _headerSent?: boolean; _header?: string | null };

/** Where flattenHead puts what it computed: a value nobody reads can be optimised away with the call that made it. */
let headSink = 0;

/**
 * Flattens the head writeHead stored. Node builds it by `+=` per header, a
 * tree of ~26 cons strings (the pieces, their separators, every partial
 * sum), and res._header keeps it for the response's life: for a stream,
 * ~0.8 KB of the ~13 KB it holds while it runs, copied by every scavenge
 * that finds it young (issue 14). V8 reads a number only from a flat
 * string and flattens a cons string in place to do it: the head becomes
 * one flat string, the tree garbage before it is ever copied. The value
 * (NaN) is not used; the head's characters are unchanged.
 */
export function flattenHead(res: ServerResponse): void {
  const head = (res as Outgoing)._header;
  if (typeof head === "string") headSink = Number(head);
}

/**
 * The socket a framed chunk may go to directly: the response's own (not a
 * pipelined one still waiting its turn), its head on the wire (writeHead
 * only stores it: the first write carries it), chunked, nothing of its own
 * still queued in front. Anything else goes through res.write.
 */
function directSocket(res: Outgoing): Socket | undefined {
  const socket = res.socket as (Socket & { _httpMessage?: unknown }) | null;
  if (!socket || socket._httpMessage !== res || res._headerSent !== true || res.chunkedEncoding !== true) return undefined;
  // (A corked socket is fine: its writes keep their order. The relay never
  // calls res.cork(), which would hold pieces in Node's own chunk buffer.)
  if ((res.outputData?.length ?? 0) > 0 || socket.destroyed) return undefined;
  return socket;
}

/** Lower-case hex digits, by value. */
const HEX = Buffer.from("0123456789abcdef", "latin1");

/**
 * One chunk as one buffer: size line, data, CRLF. The size's hex digits are
 * set byte by byte: Buffer#write of the size line (a string made for it,
 * then an encoding switch and a native call) was the costliest step of
 * framing a token's chunk.
 */
export function frame(piece: Uint8Array): Buffer {
  const n = piece.length;
  let digits = 1;
  while (digits < 8 && n >>> (4 * digits) !== 0) digits++;
  const at = digits + 2;
  const buf = Buffer.allocUnsafe(at + n + 2);
  for (let i = 0, v = n; i < digits; i++, v >>>= 4) buf[digits - 1 - i] = HEX[v & 0xf]!;
  buf[digits] = 0x0d;
  buf[digits + 1] = 0x0a;
  buf.set(piece, at);
  buf[at + n] = 0x0d;
  buf[at + n + 1] = 0x0a;
  return buf;
}

function drained(emitter: Socket | ServerResponse, res: ServerResponse): Promise<void> {
  return new Promise<void>((resolve) => {
    const done = () => {
      emitter.off("drain", done);
      res.off("close", done);
      resolve();
    };
    emitter.once("drain", done);
    res.once("close", done);
  });
}

/**
 * A writer of pieces to `res` (its status and headers set, not yet sent):
 * the first piece goes with the head through res.write (one packet), the
 * rest as framed chunks straight to the socket when directSocket allows.
 * An empty piece writes nothing (a zero-length chunk would end the body).
 */
export function pieceWriter(res: ServerResponse): PieceWrite {
  return (piece) => {
    const len = typeof piece === "string" ? Buffer.byteLength(piece) : piece.length;
    if (len === 0) return true;
    const socket = directSocket(res as Outgoing);
    if (!socket) return res.write(piece) ? true : drained(res, res);
    const ok = typeof piece === "string" ? socket.write(len.toString(16) + CRLF + piece + CRLF) : socket.write(frame(piece));
    return ok ? true : drained(socket, res);
  };
}
