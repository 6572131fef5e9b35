import { describe, expect, it } from "vitest";
import { imageSize } from "./image-size.ts";
import { IMAGE_TOKENS_UNKNOWN_SIZE, imageTokensUpperBound, imageUrlTokens } from "./media.ts";

// Every image here is built by hand, byte by byte, as its format lays it out,
// and is a whole file a decoder opens (BMP, TIFF and GIF as pixels; HEIF and
// AVIF as containers whose coded image is a placeholder): a size read from a
// header must be the size of the file that header starts.

const u16le = (n: number) => Buffer.from([n & 0xff, (n >> 8) & 0xff]);
const u16be = (n: number) => Buffer.from([(n >> 8) & 0xff, n & 0xff]);
const u32le = (n: number) => {
  const b = Buffer.alloc(4);
  b.writeUInt32LE(n >>> 0);
  return b;
};
const u32be = (n: number) => {
  const b = Buffer.alloc(4);
  b.writeUInt32BE(n >>> 0);
  return b;
};
const i32le = (n: number) => {
  const b = Buffer.alloc(4);
  b.writeInt32LE(n);
  return b;
};
const latin1 = (s: string) => Buffer.from(s, "latin1");
const dataUrl = (bytes: Buffer, type: string) => `data:${type};base64,${bytes.toString("base64")}`;
const sized = (bytes: Buffer) => imageSize(bytes.toString("base64"));

// ---- BMP

/** A BMP with a BITMAPINFOHEADER: 8-bit RLE (one palette colour, the end-of-bitmap escape: a whole picture in a few bytes, bottom-up as RLE must be). */
function bmpRle(width: number, height: number, header = 40): Buffer {
  const palette = u32le(0x00ffffff);
  const pixels = Buffer.from([0x00, 0x01]);
  const dib = Buffer.concat([u32le(header), i32le(width), i32le(height), u16le(1), u16le(8), u32le(1 /* BI_RLE8 */), u32le(pixels.length), u32le(2835), u32le(2835), u32le(1), u32le(0), Buffer.alloc(header - 40)]);
  const offset = 14 + dib.length + palette.length;
  return Buffer.concat([latin1("BM"), u32le(offset + pixels.length), u32le(0), u32le(offset), dib, palette, pixels]);
}

/** A 24-bit uncompressed BMP, rows padded to 4 bytes; a negative height stores them top-down. */
function bmpRgb(width: number, height: number): Buffer {
  const row = Math.ceil((width * 3) / 4) * 4;
  const pixels = Buffer.alloc(row * Math.abs(height), 0x7f);
  const dib = Buffer.concat([u32le(40), i32le(width), i32le(height), u16le(1), u16le(24), u32le(0), u32le(pixels.length), u32le(2835), u32le(2835), u32le(0), u32le(0)]);
  return Buffer.concat([latin1("BM"), u32le(54 + pixels.length), u32le(0), u32le(54), dib, pixels]);
}

/** An OS/2-era BMP: a 12-byte BITMAPCOREHEADER with 16-bit sides, 24-bit pixels. */
function bmpCore(width: number, height: number): Buffer {
  const row = Math.ceil((width * 3) / 4) * 4;
  const pixels = Buffer.alloc(row * height, 0x30);
  const dib = Buffer.concat([u32le(12), u16le(width), u16le(height), u16le(1), u16le(24)]);
  return Buffer.concat([latin1("BM"), u32le(26 + pixels.length), u32le(0), u32le(26), dib, pixels]);
}

// ---- TIFF

interface TiffOptions {
  little?: boolean;
  /** ImageWidth and ImageLength as SHORT (3) or LONG (4). */
  type?: 3 | 4;
  /** Entries added to IFD0 (tag, type, count, value), after the baseline ones. */
  extra?: [number, number, number, number][];
  /** IFD0's offset, when it is not where the file puts it. */
  ifdOffset?: number;
  /** The next IFD's offset (0: none). */
  next?: number;
}

/**
 * A baseline bilevel TIFF (1 bit a pixel, PackBits rows: each row is runs of
 * 128 zero bytes, 2 bytes a run), its IFD0 after the pixels as libtiff
 * writes it.
 */
function tiff(width: number, height: number, o: TiffOptions = {}): Buffer {
  const little = o.little ?? true;
  const u16 = little ? u16le : u16be;
  const u32 = little ? u32le : u32be;
  const rowBytes = Math.ceil(width / 8);
  const runs: number[] = [];
  for (let left = rowBytes; left > 0; left -= 128) runs.push(257 - Math.min(128, left), 0); // -(n-1) as a byte, then the repeated byte
  const pixels = Buffer.from(Array.from({ length: height }, () => runs).flat());
  const sideType = o.type ?? (width > 0xffff || height > 0xffff ? 4 : 3);
  const entries: [number, number, number, number][] = [
    [256, sideType, 1, width],
    [257, sideType, 1, height],
    [259, 3, 1, 32773], // PackBits
    [262, 3, 1, 0], // WhiteIsZero
    [273, 4, 1, 8], // StripOffsets: the pixels follow the header
    [278, sideType, 1, height], // RowsPerStrip: one strip
    [279, 4, 1, pixels.length],
    ...(o.extra ?? []),
  ];
  const ifdAt = 8 + pixels.length;
  const ifd = Buffer.concat([
    u16(entries.length),
    ...entries.map(([tag, type, count, value]) => Buffer.concat([u16(tag), u16(type), u32(count), type === 3 ? Buffer.concat([u16(value), u16(0)]) : u32(value)])),
    u32(o.next ?? 0),
  ]);
  return Buffer.concat([latin1(little ? "II" : "MM"), u16(42), u32(o.ifdOffset ?? ifdAt), pixels, ifd]);
}

// ---- HEIF / AVIF (ISOBMFF)

const box = (type: string, ...payload: Buffer[]) => {
  const body = Buffer.concat(payload);
  return Buffer.concat([u32be(8 + body.length), latin1(type), body]);
};
const fullBox = (type: string, version: number, flags: number, ...payload: Buffer[]) => box(type, Buffer.from([version, (flags >> 16) & 0xff, (flags >> 8) & 0xff, flags & 0xff]), ...payload);
const ispe = (w: number, h: number) => fullBox("ispe", 0, 0, u32be(w), u32be(h));

interface Item {
  id: number;
  type: string;
  /** Its properties, as boxes (each added to ipco once per item, in order). */
  properties: Buffer[];
  essential?: boolean;
}

interface HeifOptions {
  brand?: "heic" | "avif";
  primary?: number;
  /** ipma's version and flags (1: 15-bit property indices). */
  ipmaVersion?: number;
  ipmaFlags?: number;
  /** Top-level boxes between ftyp and meta (an mdat first, as some writers put it). */
  before?: Buffer[];
  /** Boxes added inside meta. */
  metaExtra?: Buffer[];
}

/**
 * A HEIF/AVIF file: ftyp, then meta (hdlr `pict`, pitm, iinf, iloc, iprp:
 * ipco + ipma), then mdat. Items are coded images (`hvc1`/`av01`) or a
 * `grid` of them; their coded data is placeholder bytes in mdat.
 */
function heif(items: Item[], o: HeifOptions = {}): Buffer {
  const brand = o.brand ?? "heic";
  const ftyp = box("ftyp", latin1(brand), u32be(0), latin1("mif1"), latin1(brand), latin1("miaf"));
  const hdlr = fullBox("hdlr", 0, 0, u32be(0), latin1("pict"), Buffer.alloc(12), Buffer.from([0]));
  const pitm = fullBox("pitm", 0, 0, u16be(o.primary ?? items[0]!.id));
  const iinf = fullBox("iinf", 0, 0, u16be(items.length), ...items.map((it) => fullBox("infe", 2, 0, u16be(it.id), u16be(0), latin1(it.type), Buffer.from([0]))));
  const properties: Buffer[] = [];
  const wide = ((o.ipmaFlags ?? 0) & 1) === 1;
  const version = o.ipmaVersion ?? 0;
  const entries = items.map((it) => {
    const indices = it.properties.map((p) => properties.push(p));
    return Buffer.concat([
      version < 1 ? u16be(it.id) : u32be(it.id),
      Buffer.from([indices.length]),
      ...indices.map((index) => (wide ? u16be(index | (it.essential ? 0x8000 : 0)) : Buffer.from([index | (it.essential ? 0x80 : 0)]))),
    ]);
  });
  const iprp = box("iprp", box("ipco", ...properties), fullBox("ipma", version, o.ipmaFlags ?? 0, u32be(items.length), ...entries));
  const coded = Buffer.alloc(64, 0x5a);
  // iloc v0: 4-byte offsets and lengths, no base offset; every item's data is the same placeholder in mdat (its offset patched below).
  const iloc = (mdatData: number) =>
    fullBox("iloc", 0, 0, Buffer.from([0x44, 0x00]), u16be(items.length), ...items.map((it) => Buffer.concat([u16be(it.id), u16be(0), u16be(1), u32be(mdatData), u32be(coded.length)])));
  const before = Buffer.concat(o.before ?? []);
  const meta = (mdatData: number) => fullBox("meta", 0, 0, hdlr, pitm, iloc(mdatData), iinf, iprp, ...(o.metaExtra ?? []));
  const mdatData = ftyp.length + before.length + meta(0).length + 8;
  return Buffer.concat([ftyp, before, meta(mdatData), box("mdat", coded)]);
}

const hvcC = box("hvcC", Buffer.from([1, 1, 0x60, 0, 0, 0, 0x90, 0, 0, 0, 0, 0, 0x5d, 0xf0, 0, 0xfc, 0xfd, 0xf8, 0xf8, 0, 0, 0x0f, 0]));
const av1C = box("av1C", Buffer.from([0x81, 0x00, 0x0c, 0x00]));
/** A single coded image of that size. */
const heic = (w: number, h: number, o: HeifOptions = {}) => heif([{ id: 1, type: "hvc1", properties: [hvcC, ispe(w, h)], essential: true }], o);
const avif = (w: number, h: number, o: HeifOptions = {}) => heif([{ id: 1, type: "av01", properties: [av1C, ispe(w, h)], essential: true }], { ...o, brand: "avif" });

// ---- GIF

interface GifFrame {
  left?: number;
  top?: number;
  width: number;
  height: number;
}

/**
 * A GIF89a: a 2-colour global table, a graphic control extension and an
 * image per frame, each frame's LZW data a clear code then the end code
 * (a frame of the background colour), then the trailer.
 */
function gif(width: number, height: number, frames: GifFrame[] = [{ width, height }], trailer = true): Buffer {
  const parts = [latin1("GIF89a"), u16le(width), u16le(height), Buffer.from([0x80, 0, 0]), Buffer.from([0, 0, 0, 0xff, 0xff, 0xff])];
  for (const f of frames) {
    parts.push(Buffer.from([0x21, 0xf9, 4, 0, 10, 0, 0, 0]));
    parts.push(Buffer.from([0x2c]), u16le(f.left ?? 0), u16le(f.top ?? 0), u16le(f.width), u16le(f.height), Buffer.from([0]));
    parts.push(Buffer.from([2, 1, 0x2c, 0]));
  }
  if (trailer) parts.push(Buffer.from([0x3b]));
  return Buffer.concat(parts);
}

describe("an image's size from its header: BMP, TIFF, HEIF/AVIF and GIF", () => {
  it("reads a BMP's DIB header: BITMAPINFOHEADER (and its V4/V5 lengths), top-down rows, BITMAPCOREHEADER", () => {
    expect(sized(bmpRle(3000, 2000))).toEqual({ width: 3000, height: 2000 });
    expect(sized(bmpRle(3000, 2000, 108))).toEqual({ width: 3000, height: 2000 });
    expect(sized(bmpRle(3000, 2000, 124))).toEqual({ width: 3000, height: 2000 });
    // A negative height stores rows top-down: the picture is as tall.
    expect(sized(bmpRgb(3, -2))).toEqual({ width: 3, height: 2 });
    expect(sized(bmpRgb(5, 3))).toEqual({ width: 5, height: 3 });
    expect(sized(bmpCore(7, 4))).toEqual({ width: 7, height: 4 });
  });

  it("reads a TIFF's IFD0, little- and big-endian, SHORT and LONG sides, wherever the IFD sits", () => {
    for (const little of [true, false]) {
      for (const type of [3, 4] as const) {
        expect(sized(tiff(3000, 2000, { little, type }))).toEqual({ width: 3000, height: 2000 });
      }
      expect(sized(tiff(70_000, 3, { little }))).toEqual({ width: 70_000, height: 3 });
    }
    expect(sized(tiff(1, 1))).toEqual({ width: 1, height: 1 });
  });

  it("reads a HEIC's and an AVIF's primary item's ispe, not a larger or smaller other item's", () => {
    expect(sized(heic(4032, 3024))).toEqual({ width: 4032, height: 3024 });
    expect(sized(avif(1920, 1080))).toEqual({ width: 1920, height: 1080 });
    // 15-bit property indices and a version-1 ipma (32-bit item ids).
    expect(sized(heic(640, 480, { ipmaFlags: 1, ipmaVersion: 1 }))).toEqual({ width: 640, height: 480 });
    // A phone photo: the primary item is a grid of 512-px tiles; its ispe is the whole picture.
    const tile = (id: number) => ({ id, type: "hvc1", properties: [hvcC, ispe(512, 512)], essential: true });
    const photo = heif([{ id: 1, type: "grid", properties: [ispe(4032, 3024)] }, tile(2), tile(3), tile(4)]);
    expect(sized(photo)).toEqual({ width: 4032, height: 3024 });
    // A thumbnail before the primary item, and a larger auxiliary image: neither is the picture.
    const withOthers = heif(
      [
        { id: 5, type: "hvc1", properties: [hvcC, ispe(320, 240)] },
        { id: 7, type: "hvc1", properties: [hvcC, ispe(8000, 8000)] },
        { id: 6, type: "hvc1", properties: [hvcC, ispe(2000, 1000)] },
      ],
      { primary: 6 },
    );
    expect(sized(withOthers)).toEqual({ width: 2000, height: 1000 });
    // Rotation swaps the sides, which no formula minds; it is read through.
    expect(sized(heif([{ id: 1, type: "hvc1", properties: [hvcC, ispe(300, 200), box("irot", Buffer.from([1]))] }]))).toEqual({ width: 300, height: 200 });
    // meta after an mdat, as some writers put it.
    expect(sized(heic(800, 600, { before: [box("mdat", Buffer.alloc(1000))] }))).toEqual({ width: 800, height: 600 });
  });

  it("a GIF counts as its logical screen, or more where a frame reaches past it (Pillow grows its canvas to hold the frame)", () => {
    expect(sized(gif(3000, 2000))).toEqual({ width: 3000, height: 2000 });
    expect(sized(gif(40, 30, [{ width: 40, height: 30 }, { left: 10, top: 5, width: 20, height: 20 }]))).toEqual({ width: 40, height: 30 });
    // A frame past the screen: the first one, or a later one.
    expect(sized(gif(10, 10, [{ left: 1000, top: 0, width: 2000, height: 10 }]))).toEqual({ width: 3000, height: 10 });
    expect(sized(gif(10, 10, [{ width: 10, height: 10 }, { width: 10, height: 10 }, { top: 3000, width: 4, height: 1000 }]))).toEqual({ width: 10, height: 4000 });
    // A file of frames past the bytes the head decodes (512 kB) is unknown, never its screen.
    const frames = Array.from({ length: 30_000 }, () => ({ width: 1, height: 1 }));
    expect(sized(gif(10, 10, frames))).toBeUndefined();
  });

  it("sized formats are held at their formula, below the unknown-size bound", () => {
    for (const [bytes, type] of [
      [bmpRle(1000, 400), "image/bmp"],
      [tiff(1000, 400), "image/tiff"],
      [heic(1000, 400), "image/heic"],
      [avif(1000, 400), "image/avif"],
      [gif(1000, 400), "image/gif"],
    ] as const) {
      expect(imageUrlTokens(dataUrl(bytes, type))).toBe(imageTokensUpperBound({ width: 1000, height: 400 }));
    }
    expect(imageTokensUpperBound({ width: 1000, height: 400 })).toBeLessThan(IMAGE_TOKENS_UNKNOWN_SIZE);
  });
});

describe("a malformed or hostile header is unknown: the unknown-size bound, without throwing or hanging", () => {
  const unknown = (bytes: Buffer) => {
    const started = performance.now();
    expect(sized(bytes)).toBeUndefined();
    expect(imageUrlTokens(dataUrl(bytes, "image/png"))).toBe(IMAGE_TOKENS_UNKNOWN_SIZE);
    // Each walk is bounded by the bytes decoded (512 kB at most): never a loop.
    expect(performance.now() - started).toBeLessThan(2_000);
  };
  const patch = (bytes: Buffer, at: number, value: Buffer) => {
    const b = Buffer.from(bytes);
    value.copy(b, at);
    return b;
  };

  it("BMP: an unknown header length, a width ≤ 0, a side of 0, a file cut inside its header", () => {
    unknown(patch(bmpRle(30, 20), 14, u32le(0)));
    unknown(patch(bmpRle(30, 20), 14, u32le(999)));
    unknown(patch(bmpRle(30, 20), 18, i32le(-30)));
    unknown(patch(bmpRle(30, 20), 22, i32le(0)));
    unknown(bmpRle(30, 20).subarray(0, 25));
    unknown(latin1("BM"));
  });

  it("TIFF: IFD offsets out of range or into the header, an IFD longer than the file, a side missing, twice with two values, of another type or count; BigTIFF", () => {
    const t = tiff(300, 200);
    unknown(patch(t, 4, u32le(0xfffffff0)));
    unknown(patch(t, 4, u32le(0)));
    unknown(patch(t, 4, u32le(4)));
    unknown(patch(t, 4, u32le(t.length - 1)));
    unknown(tiff(300, 200, { ifdOffset: 8 })); // the IFD points into the pixels: 0 entries or garbage, never a size
    const ifd = t.readUInt32LE(4);
    unknown(patch(t, ifd, u16le(0xffff))); // 65,535 entries: 786 kB, past the bytes decoded
    unknown(patch(t, ifd + 2 + 12, u16le(999))); // ImageLength's tag renamed: no height
    unknown(tiff(300, 200, { extra: [[256, 3, 1, 301]] })); // ImageWidth twice, two values
    unknown(tiff(300, 200, { extra: [[257, 4, 2, 200]] })); // two values for one side
    unknown(patch(t, ifd + 2 + 2, u16le(5))); // ImageWidth as a RATIONAL
    unknown(t.subarray(0, t.length - 20));
    unknown(Buffer.concat([latin1("II"), u16le(43), u16le(8), u16le(0), u32le(16), u32le(0)])); // BigTIFF
    // The same tag twice with one value, and a next-IFD offset back to IFD0 (a loop for a walker of the chain): IFD0 alone is read.
    expect(sized(tiff(300, 200, { extra: [[256, 3, 1, 300]] }))).toEqual({ width: 300, height: 200 });
    const looped = tiff(300, 200);
    expect(sized(patch(looped, looped.length - 4, u32le(looped.readUInt32LE(4))))).toEqual({ width: 300, height: 200 });
  });

  it("HEIF/AVIF: box sizes of 0, below their header, huge or past their container; a loop of tiny boxes; ipma claiming more than it holds or an index past ipco; no pitm; no ispe; two sizes; a crop", () => {
    const h = heic(640, 480);
    const at = (type: string) => h.indexOf(latin1(type)) - 4;
    const meta = at("meta");
    unknown(patch(h, at("hvcC"), u32be(0))); // size 0: hvcC runs to ipco's end, swallowing the ispe that ipma names
    unknown(patch(h, at("ipco"), u32be(4))); // smaller than its header
    unknown(patch(h, at("ipco"), u32be(0x7fffffff))); // past iprp
    unknown(patch(h, at("iprp"), u32be(1))); // a 64-bit size follows: ipco's header read as one, above 4 GiB
    unknown(patch(patch(h, at("iprp"), u32be(1)), at("iprp") + 8, Buffer.concat([u32be(0), u32be(0xffffff00)]))); // a 64-bit size past meta
    unknown(patch(h, meta, u32be(h.length * 4))); // meta past the file
    unknown(patch(h, at("ftyp"), u32be(3)));
    unknown(patch(h, 8, latin1("mp42\0\0\0\0isomiso2mp41"))); // an MP4's brands: no image brand
    const ipma = at("ipma");
    unknown(patch(h, ipma + 12, u32be(0xffffffff))); // 4 billion entries in a box of one
    unknown(patch(h, ipma + 19, Buffer.from([0x80 | 9]))); // a property index past ipco
    unknown(heif([{ id: 1, type: "hvc1", properties: [hvcC] }])); // no ispe
    unknown(heif([{ id: 1, type: "hvc1", properties: [hvcC, ispe(640, 480), ispe(6400, 480)] }])); // two sizes
    unknown(heif([{ id: 1, type: "hvc1", properties: [hvcC, ispe(640, 480), box("clap", Buffer.alloc(32))] }])); // cropped
    unknown(heic(640, 480, { primary: 9 })); // pitm names an item with no properties
    unknown(heic(640, 480, { metaExtra: [fullBox("pitm", 0, 0, u16be(1))] })); // two pitm
    // meta behind 600 kB of mdat: past the bytes decoded.
    unknown(heic(640, 480, { before: [box("mdat", Buffer.alloc(600_000))] }));
    // 5,000 empty boxes in meta: more than any file holds, refused without reading them all.
    unknown(heic(640, 480, { metaExtra: Array.from({ length: 5_000 }, () => box("free")) }));
    // A box of size 8 repeated at the top level, never reaching meta.
    unknown(Buffer.concat([h.subarray(0, at("meta")), ...Array.from({ length: 100 }, () => box("free"))]));
  });

  it("GIF: cut short, an unknown block, sub-block lengths past the end, an image-less file, extensions past the bytes decoded", () => {
    const g = gif(300, 200);
    unknown(g.subarray(0, g.length - 1)); // no trailer
    unknown(g.subarray(0, 12));
    unknown(patch(g, 13 + 6, Buffer.from([0x99])));
    unknown(patch(g, g.length - 4, Buffer.from([0xff]))); // a sub-block of 255 bytes where 3 are left
    unknown(gif(300, 200, []));
    // 3 MB of comment extension before the first frame: the walk stops at the head's 512 kB.
    const comment = Buffer.concat([Buffer.from([0x21, 0xfe]), ...Array.from({ length: 12_000 }, () => Buffer.concat([Buffer.from([255]), Buffer.alloc(255, 0x41)])), Buffer.from([0])]);
    unknown(Buffer.concat([g.subarray(0, 19), comment, g.subarray(19)]));
  });

  it("never throws on any byte changed, and any cut, of a valid file of each format", () => {
    let seed = 42;
    const random = () => ((seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31) / 2 ** 31);
    for (const file of [bmpRgb(5, -3), bmpCore(3, 2), tiff(40, 30), tiff(40, 30, { little: false }), heic(64, 48), avif(64, 48, { ipmaFlags: 1 }), gif(40, 30, [{ width: 40, height: 30 }, { width: 2, height: 2 }])]) {
      for (let cut = 0; cut <= file.length; cut++) expect(() => sized(file.subarray(0, cut))).not.toThrow();
      for (let n = 0; n < 3_000; n++) {
        const b = Buffer.from(file);
        for (let k = 0; k < 1 + Math.floor(random() * 3); k++) b[Math.floor(random() * b.length)] = Math.floor(random() * 256);
        const size = sized(b);
        if (size) expect(Number.isSafeInteger(size.width) && Number.isSafeInteger(size.height) && size.width >= 0 && size.height >= 0).toBe(true);
      }
    }
  });
});
