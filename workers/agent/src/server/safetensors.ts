// Safetensors encoding: 8-byte little-endian header length, a JSON header
// naming each tensor's dtype, shape and byte range, then the raw bytes.
import { DType, type Tensor } from "@switchyard/proto/switchyard/engine/v1/engine_pb";

export function encodeSafetensors(tensors: [string, Tensor][], metadata: Record<string, string> = {}): Uint8Array {
  const header: Record<string, unknown> = { __metadata__: metadata };
  let offset = 0;
  for (const [name, t] of tensors) {
    header[name] = { dtype: t.dtype === DType.DTYPE_F16 ? "F16" : "F32", shape: t.shape.map(Number), data_offsets: [offset, offset + t.data.byteLength] };
    offset += t.data.byteLength;
  }
  let json = JSON.stringify(header);
  // Pad the header with spaces so the data starts 8-byte aligned.
  json += " ".repeat((8 - ((8 + Buffer.byteLength(json)) % 8)) % 8);
  const headerBytes = Buffer.from(json, "utf8");
  const out = new Uint8Array(8 + headerBytes.length + offset);
  new DataView(out.buffer).setBigUint64(0, BigInt(headerBytes.length), true);
  out.set(headerBytes, 8);
  let pos = 8 + headerBytes.length;
  for (const [, t] of tensors) {
    out.set(t.data, pos);
    pos += t.data.byteLength;
  }
  return out;
}

export interface DecodedTensor {
  dtype: "F32" | "F16";
  shape: number[];
  data: Uint8Array;
}

export function decodeSafetensors(bytes: Uint8Array): { tensors: Record<string, DecodedTensor>; metadata: Record<string, string> } {
  const n = Number(new DataView(bytes.buffer, bytes.byteOffset, 8).getBigUint64(0, true));
  const header = JSON.parse(Buffer.from(bytes.subarray(8, 8 + n)).toString("utf8")) as Record<string, { dtype: "F32" | "F16"; shape: number[]; data_offsets: [number, number] }> & { __metadata__?: Record<string, string> };
  const base = 8 + n;
  const tensors: Record<string, DecodedTensor> = {};
  for (const [k, v] of Object.entries(header)) {
    if (k === "__metadata__") continue;
    const h = v as { dtype: "F32" | "F16"; shape: number[]; data_offsets: [number, number] };
    tensors[k] = { dtype: h.dtype, shape: h.shape, data: bytes.subarray(base + h.data_offsets[0], base + h.data_offsets[1]) };
  }
  return { tensors, metadata: header.__metadata__ ?? {} };
}

function f16ToF32(h: number): number {
  const s = h & 0x8000 ? -1 : 1;
  const e = (h >> 10) & 0x1f;
  const f = h & 0x3ff;
  if (e === 0) return s * 2 ** -14 * (f / 1024);
  if (e === 31) return f ? NaN : s * Infinity;
  return s * 2 ** (e - 15) * (1 + f / 1024);
}

export function tensorToFloats(t: { dtype: DType | "F32" | "F16"; data: Uint8Array }): number[] {
  const dv = new DataView(t.data.buffer, t.data.byteOffset, t.data.byteLength);
  const f16 = t.dtype === DType.DTYPE_F16 || t.dtype === "F16";
  const n = t.data.byteLength / (f16 ? 2 : 4);
  const out = new Array<number>(n);
  for (let i = 0; i < n; i++) out[i] = f16 ? f16ToF32(dv.getUint16(i * 2, true)) : dv.getFloat32(i * 4, true);
  return out;
}
