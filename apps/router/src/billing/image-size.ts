// An image's pixel size, read from the header at the start of its base64
// payload (no more of it is decoded than the header needs): what the
// providers' image-token formulas (media.ts) are worked out from.
import { ascii, be16, Head, le16, le24 } from "./base64-head.ts";

export interface PixelSize {
  width: number;
  height: number;
}

/** A JPEG's frame size: the first SOFn marker's, walking the segments before it (their lengths skip EXIF, ICC, …). */
function jpegSize(head: Head): PixelSize | undefined {
  let i = 2;
  for (let segments = 0; segments < 1024; segments++) {
    if (!head.has(i + 4)) return undefined;
    const b = head.bytes;
    if (b[i] !== 0xff) return undefined;
    const marker = b[i + 1]!;
    if (marker === 0xff) {
      i++; // fill byte
      continue;
    }
    // Markers without a length: TEM, RST0-7, SOI.
    if (marker === 0x01 || (marker >= 0xd0 && marker <= 0xd8)) {
      i += 2;
      continue;
    }
    // SOF0-15, except DHT (C4), JPG (C8) and DAC (CC): precision, height, width.
    if (marker >= 0xc0 && marker <= 0xcf && marker !== 0xc4 && marker !== 0xc8 && marker !== 0xcc) {
      if (!head.has(i + 9)) return undefined;
      return { height: be16(head.bytes, i + 5), width: be16(head.bytes, i + 7) };
    }
    // Image data or its end before any frame header: not a JPEG we can read.
    if (marker === 0xda || marker === 0xd9) return undefined;
    i += 2 + be16(b, i + 2);
  }
  return undefined;
}

/**
 * The pixel size in a PNG (IHDR), JPEG (SOFn), GIF (logical screen) or WebP
 * (VP8, VP8L, VP8X) header, or undefined when it is none of those or cut short.
 */
export function imageSize(b64: string): PixelSize | undefined {
  const head = new Head(b64);
  const b = head.bytes;
  if (b.length >= 24 && b[0] === 0x89 && ascii(b, 1, "PNG") && ascii(b, 12, "IHDR")) {
    return { width: b.readUInt32BE(16), height: b.readUInt32BE(20) };
  }
  if (b.length >= 3 && b[0] === 0xff && b[1] === 0xd8 && b[2] === 0xff) return jpegSize(head);
  if (b.length >= 10 && (ascii(b, 0, "GIF87a") || ascii(b, 0, "GIF89a"))) return { width: le16(b, 6), height: le16(b, 8) };
  if (b.length >= 30 && ascii(b, 0, "RIFF") && ascii(b, 8, "WEBP")) {
    // Lossy: a frame tag (3 bytes), the start code 9d 01 2a, then 14-bit width and height.
    if (ascii(b, 12, "VP8 ") && b[23] === 0x9d && b[24] === 0x01 && b[25] === 0x2a) return { width: le16(b, 26) & 0x3fff, height: le16(b, 28) & 0x3fff };
    // Lossless: the signature 0x2f, then width − 1 and height − 1 in 14 bits each.
    if (ascii(b, 12, "VP8L") && b[20] === 0x2f) {
      const bits = b.readUInt32LE(21);
      return { width: (bits & 0x3fff) + 1, height: ((bits >>> 14) & 0x3fff) + 1 };
    }
    // Extended: flags (4 bytes), then canvas width − 1 and height − 1 in 24 bits each.
    if (ascii(b, 12, "VP8X")) return { width: le24(b, 24) + 1, height: le24(b, 27) + 1 };
  }
  return undefined;
}
