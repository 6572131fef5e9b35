// An image's pixel size, read from the header at the start of its base64
// payload (no more of it is decoded than the header needs): what the
// providers' image-token formulas (media.ts) are worked out from.
import { ascii, base64Bytes, be16, Head, le16, le24 } from "./base64-head.ts";

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
 * A GIF's size: its logical screen, or larger where a frame reaches past it.
 * A conforming file keeps every frame inside the screen, but a decoder may
 * not clip one that does not — Pillow grows the canvas to hold it — and
 * Anthropic does not say which frames it reads: so every frame's
 * descriptor (left + width, top + height) counts, walking the file's blocks
 * to its trailer. A GIF whose walk does not end within the bytes we decode
 * (HEAD_MAX), or that breaks off, is unknown.
 */
function gifSize(head: Head): PixelSize | undefined {
  let b = head.bytes;
  let width = le16(b, 6);
  let height = le16(b, 8);
  const colorTable = (packed: number) => (packed & 0x80 ? 3 << ((packed & 7) + 1) : 0);
  let i = 13 + colorTable(b[10]!);
  let frames = 0;
  // Each step moves i forward by at least a byte, and has() refuses past HEAD_MAX: the walk ends.
  for (;;) {
    if (!head.has(i + 1)) return undefined;
    b = head.bytes;
    const block = b[i]!;
    if (block === 0x3b) return frames > 0 ? { width, height } : undefined; // the trailer
    if (block === 0x2c) {
      // An image descriptor: left, top, width, height, flags; then its color table and the LZW code size.
      if (!head.has(i + 10)) return undefined;
      b = head.bytes;
      width = Math.max(width, le16(b, i + 1) + le16(b, i + 5));
      height = Math.max(height, le16(b, i + 3) + le16(b, i + 7));
      frames++;
      i += 10 + colorTable(b[i + 9]!) + 1;
    } else if (block === 0x21) {
      i += 2; // an extension: its label, then sub-blocks as image data has
    } else {
      return undefined;
    }
    // Sub-blocks: a length byte, that many bytes; a zero length ends them.
    for (;;) {
      if (!head.has(i + 1)) return undefined;
      const n = head.bytes[i]!;
      i += 1 + n;
      if (n === 0) break;
    }
  }
}

/**
 * A BMP's size from its DIB header: BITMAPCOREHEADER (12 bytes, 16-bit
 * sides) or BITMAPINFOHEADER and its later versions (40, 52, 56, 64, 108,
 * 124 bytes — the ones Pillow reads; signed 32-bit sides, a negative height
 * for rows stored top-down). Any other header, or a side that is zero or a
 * negative width, is unknown.
 */
function bmpSize(head: Head): PixelSize | undefined {
  if (!head.has(26)) return undefined;
  const b = head.bytes;
  const header = b.readUInt32LE(14);
  if (header === 12) return positive(b.readUInt16LE(18), b.readUInt16LE(20));
  if (![40, 52, 56, 64, 108, 124].includes(header)) return undefined;
  return positive(b.readInt32LE(18), Math.abs(b.readInt32LE(22)));
}

const positive = (width: number, height: number): PixelSize | undefined => (width > 0 && height > 0 ? { width, height } : undefined);

/**
 * A TIFF's size: ImageWidth (256) and ImageLength (257) in its first IFD,
 * in either byte order, SHORT or LONG, one value each. Only IFD0 is read (it
 * is the first page, the one a decoder opens), so no chain of IFDs can loop.
 * An IFD past the bytes we decode (libtiff often writes it after the image
 * data), a tag given twice with two values, or a side missing is unknown;
 * so is BigTIFF.
 */
function tiffSize(head: Head, little: boolean): PixelSize | undefined {
  if (!head.has(8)) return undefined;
  const u16 = (i: number) => (little ? head.bytes.readUInt16LE(i) : head.bytes.readUInt16BE(i));
  const u32 = (i: number) => (little ? head.bytes.readUInt32LE(i) : head.bytes.readUInt32BE(i));
  const ifd = u32(4);
  // The IFD follows the 8-byte header; has() refuses what lies past HEAD_MAX, however far the offset points.
  if (ifd < 8 || !head.has(ifd + 2)) return undefined;
  const entries = u16(ifd);
  if (!head.has(ifd + 2 + 12 * entries)) return undefined;
  const sides: Record<number, number | undefined> = { 256: undefined, 257: undefined };
  for (let e = 0; e < entries; e++) {
    const at = ifd + 2 + 12 * e;
    const tag = u16(at);
    if (tag !== 256 && tag !== 257) continue;
    const type = u16(at + 2);
    if (u32(at + 4) !== 1 || (type !== 3 && type !== 4)) return undefined;
    // One value fits the entry's 4 bytes: a SHORT sits in the first 2, in the file's byte order.
    const value = type === 3 ? u16(at + 8) : u32(at + 8);
    if (sides[tag] !== undefined && sides[tag] !== value) return undefined;
    sides[tag] = value;
  }
  return sides[256] === undefined || sides[257] === undefined ? undefined : positive(sides[256], sides[257]);
}

/** An ISOBMFF box: its type and its payload's extent in the file. */
interface Box {
  type: string;
  start: number;
  end: number;
}

/** Boxes read at most in one container: no HEIF/AVIF file's meta box holds this many, and a walk stops there. */
const BOXES_MAX = 4096;

/**
 * The box at `at` inside a container ending at `end`, or undefined when its
 * header is cut short, its size is smaller than its header, or it runs past
 * its container (so boxes never overlap, and each is at least 8 bytes: a
 * walk always moves on). Size 0 runs to the container's end; size 1 gives a
 * 64-bit size, of which a high word above 0 (4 GiB) is past anything we read.
 */
function box(head: Head, at: number, end: number): Box | undefined {
  if (at + 8 > end || !head.has(at + 8)) return undefined;
  let size = head.bytes.readUInt32BE(at);
  const type = head.bytes.toString("latin1", at + 4, at + 8);
  let start = at + 8;
  if (size === 1) {
    if (at + 16 > end || !head.has(at + 16) || head.bytes.readUInt32BE(at + 8) !== 0) return undefined;
    size = head.bytes.readUInt32BE(at + 12);
    start = at + 16;
  } else if (size === 0) {
    size = end - at;
  }
  if (size < start - at || at + size > end) return undefined;
  return { type, start, end: at + size };
}

/** The boxes filling [start, end), or undefined when one is malformed or there are more than BOXES_MAX. */
function children(head: Head, start: number, end: number): Box[] | undefined {
  const boxes: Box[] = [];
  for (let at = start; at < end; at = boxes.at(-1)!.end) {
    const next = boxes.length < BOXES_MAX ? box(head, at, end) : undefined;
    if (!next) return undefined;
    boxes.push(next);
  }
  return boxes;
}

/** ftyp brands of still images in HEIF (HEIC: HEVC-coded) and AVIF (AV1-coded), and their image-sequence brands. */
const HEIF_BRANDS = new Set(["mif1", "mif2", "msf1", "heic", "heix", "heim", "heis", "hevc", "hevx", "avif", "avis"]);

/** Top-level boxes looked through for `meta` (it follows ftyp, before or after a few others). */
const TOP_BOXES_MAX = 16;

/**
 * A HEIF (HEIC) or AVIF image's size: the `ispe` property (image spatial
 * extents, which the format requires of every image item) of its primary
 * item — meta → pitm names the item, meta → iprp → ipma associates it with
 * its properties, listed in iprp → ipco. The primary item is what a
 * decoder shows (for a photo cut in tiles, the `grid` item whose ispe is the
 * whole picture); other items are thumbnails, tiles, alpha planes. Unknown
 * when any of it is missing, malformed or past the bytes we decode, when
 * the item has two sizes, or when it is cropped (`clap`, or the old `iscl`
 * scaling): a smaller picture is not always fewer tokens (Gemini's tiles
 * follow the shorter side), so only the stated size is taken. A file whose
 * coded image or grid disagrees with its ispe breaks the format; that is not
 * checked (it needs the codec's own headers).
 */
function heifSize(head: Head, fileEnd: number): PixelSize | undefined {
  const ftyp = box(head, 0, fileEnd);
  if (!ftyp || ftyp.type !== "ftyp" || ftyp.end - ftyp.start < 8 || !head.has(ftyp.end)) return undefined;
  let branded = false;
  // The major brand, then (after the minor version) the compatible ones.
  for (let i = ftyp.start; i + 4 <= ftyp.end; i += i === ftyp.start ? 8 : 4) branded ||= HEIF_BRANDS.has(head.bytes.toString("latin1", i, i + 4));
  if (!branded) return undefined;
  let at = ftyp.end;
  for (let n = 0; n < TOP_BOXES_MAX; n++) {
    const top = box(head, at, fileEnd);
    if (!top) return undefined;
    if (top.type === "meta") return metaSize(head, top);
    at = top.end;
  }
  return undefined;
}

function metaSize(head: Head, meta: Box): PixelSize | undefined {
  // A FullBox: version and flags, then its boxes. It is read whole, so every read below is inside the decoded bytes.
  if (meta.end - meta.start < 4 || !head.has(meta.end)) return undefined;
  const boxes = children(head, meta.start + 4, meta.end);
  const pitm = boxes?.filter((c) => c.type === "pitm");
  const iprp = boxes?.filter((c) => c.type === "iprp");
  if (pitm?.length !== 1 || iprp?.length !== 1) return undefined;
  const b = head.bytes;
  // pitm: version 0 names the item in 16 bits, later versions in 32.
  const p = pitm[0]!;
  const idBytes = p.end - p.start >= 4 && b[p.start] === 0 ? 2 : 4;
  if (p.end - p.start < 4 + idBytes) return undefined;
  const primary = idBytes === 2 ? b.readUInt16BE(p.start + 4) : b.readUInt32BE(p.start + 4);
  const parts = children(head, iprp[0]!.start, iprp[0]!.end);
  const ipco = parts?.filter((c) => c.type === "ipco");
  if (ipco?.length !== 1) return undefined;
  const properties = children(head, ipco[0]!.start, ipco[0]!.end);
  if (!properties) return undefined;
  const indices: number[] = [];
  for (const ipma of parts!.filter((c) => c.type === "ipma")) if (!associations(b, ipma, primary, indices)) return undefined;
  let size: PixelSize | undefined;
  for (const index of indices) {
    if (index === 0) continue; // no property
    const property = properties[index - 1];
    if (!property || property.type === "clap" || property.type === "iscl") return undefined;
    if (property.type !== "ispe") continue;
    // A FullBox: version and flags, then width and height in 32 bits.
    if (property.end - property.start < 12) return undefined;
    const width = b.readUInt32BE(property.start + 4);
    const height = b.readUInt32BE(property.start + 8);
    if (size && (size.width !== width || size.height !== height)) return undefined;
    size = { width, height };
  }
  return size && positive(size.width, size.height);
}

/**
 * Adds to `into` the property indices (1-based into ipco) an ipma box
 * associates with `item`; false when the box is cut short. Each entry moves
 * on by at least 3 bytes inside the box: the walk ends however many entries
 * it claims.
 */
function associations(b: Buffer, ipma: Box, item: number, into: number[]): boolean {
  if (ipma.end - ipma.start < 8) return false;
  const version = b[ipma.start]!;
  const wide = (b[ipma.start + 3]! & 1) === 1; // flags: 15-bit indices instead of 7-bit
  const entries = b.readUInt32BE(ipma.start + 4);
  let i = ipma.start + 8;
  for (let e = 0; e < entries; e++) {
    const idBytes = version < 1 ? 2 : 4;
    if (i + idBytes + 1 > ipma.end) return false;
    const id = idBytes === 2 ? b.readUInt16BE(i) : b.readUInt32BE(i);
    const count = b[i + idBytes]!;
    i += idBytes + 1;
    const width = wide ? 2 : 1;
    if (i + count * width > ipma.end) return false;
    // The top bit of each says whether the property is essential; the rest is its index.
    for (let a = 0; a < count; a++, i += width) if (id === item) into.push(wide ? b.readUInt16BE(i) & 0x7fff : b[i]! & 0x7f);
  }
  return true;
}

/**
 * The pixel size in a PNG (IHDR), JPEG (SOFn), GIF (logical screen and
 * frames), WebP (VP8, VP8L, VP8X), BMP (DIB header), TIFF (IFD0) or
 * HEIF/AVIF (the primary item's ispe) header, or undefined when it is none
 * of those, cut short or malformed.
 */
export function imageSize(b64: string): PixelSize | undefined {
  const head = new Head(b64);
  const b = head.bytes;
  if (b.length >= 24 && b[0] === 0x89 && ascii(b, 1, "PNG") && ascii(b, 12, "IHDR")) {
    return { width: b.readUInt32BE(16), height: b.readUInt32BE(20) };
  }
  if (b.length >= 3 && b[0] === 0xff && b[1] === 0xd8 && b[2] === 0xff) return jpegSize(head);
  if (b.length >= 13 && (ascii(b, 0, "GIF87a") || ascii(b, 0, "GIF89a"))) return gifSize(head);
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
  if (ascii(b, 0, "BM")) return bmpSize(head);
  if (ascii(b, 0, "II*\0")) return tiffSize(head, true);
  if (ascii(b, 0, "MM\0*")) return tiffSize(head, false);
  if (ascii(b, 4, "ftyp")) return heifSize(head, base64Bytes(b64));
  return undefined;
}
