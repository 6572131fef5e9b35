// The first bytes of a base64 payload (an image's or a clip's), decoded only
// as far as a header reader asks: a request's media is sized from its headers
// without decoding what follows them.

/** Bytes of a payload decoded at most to find an image's size (a JPEG's frame header follows its EXIF/ICC segments). */
export const HEAD_MAX = 512 * 1024;

/** The bytes a base64 payload decodes to, at most (whitespace is counted as data: longer, so still a bound). */
export function base64Bytes(b64: string): number {
  const n = b64.length;
  let pad = 0;
  if (n > 0 && b64.charCodeAt(n - 1) === 61) pad++;
  if (n > 1 && b64.charCodeAt(n - 2) === 61) pad++;
  return Math.max(0, Math.floor((n * 3) / 4) - pad);
}

/** A base64 payload's first bytes, decoding more of it only when asked (from its start: whitespace inside is skipped as a decoder would). */
export class Head {
  bytes: Buffer;
  constructor(private readonly b64: string) {
    this.bytes = this.decode(64);
  }

  /** The first `n` bytes or more (a few characters over, for whitespace): slice() copies nothing past the string's end. */
  private decode(n: number): Buffer {
    return Buffer.from(this.b64.slice(0, Math.ceil(n / 3) * 4 + 16), "base64");
  }

  /** Whether bytes [0, end) are there, decoding further (doubling, up to HEAD_MAX) when they are not yet. */
  has(end: number): boolean {
    if (end <= this.bytes.length) return true;
    if (end > HEAD_MAX || this.bytes.length >= base64Bytes(this.b64)) return false;
    this.bytes = this.decode(Math.min(HEAD_MAX, Math.max(end + 1024, this.bytes.length * 2)));
    return end <= this.bytes.length;
  }
}

export const be16 = (b: Buffer, i: number) => (b[i]! << 8) | b[i + 1]!;
export const le16 = (b: Buffer, i: number) => b[i]! | (b[i + 1]! << 8);
export const le24 = (b: Buffer, i: number) => b[i]! | (b[i + 1]! << 8) | (b[i + 2]! << 16);
export const ascii = (b: Buffer, i: number, s: string) => b.length >= i + s.length && b.toString("latin1", i, i + s.length) === s;
