//! The weight and activation layouts the kernels read: ggml blocks split
//! into planes (`QData`), the AVX-512 grouped repacking, and quantized
//! activation rows (`QActs`).

use half::f16;

use super::{f16_to_f32, isa, Isa, GROUP, QK};

#[derive(Clone, Debug)]
pub enum QData {
    /// ggml `block_q4_1` split into planes: value = d * q + m, q in 0..16;
    /// element j of a block is the low nibble of qs[j], element j+16 the
    /// high nibble. Same bytes per block as ggml (16 + 2 + 2), but the
    /// scales sit in their own arrays so a row's scales convert in bulk.
    Q4_1 { qs: Vec<[u8; 16]>, d: Vec<u16>, m: Vec<u16> },
    /// ggml `block_q8_0` in planes: value = d * q.
    Q8_0 { qs: Vec<[i8; 32]>, d: Vec<u16> },
    /// Q4_1 repacked for the grouped kernels (AVX-512 VNNI: a group per
    /// zmm; AVX2: two 8-row halves per ymm; see `QMatrix::packed`):
    /// rows in groups of `GROUP`, and for group g and block b the vectors
    /// `qs[(g*nb + b)*4 + k]` hold, in 4-byte lane l, bytes 4k..4k+4 of row
    /// 16g+l's block (low nibbles: elements 4k..4k+3, high nibbles: elements
    /// 16+4k..16+4k+3). `d[g*nb + b][l]`, `m[..][l]` are row l's scales.
    Q4_1x16 { qs: Vec<Lane64>, d: Vec<[u16; GROUP]>, m: Vec<[u16; GROUP]> },
    /// Q8_0 repacked the same way, 8 vectors per (group, block), each value
    /// stored as q + 128 (an unsigned byte, what VNNI's first operand takes).
    Q8_0x16 { qs: Vec<Lane64>, d: Vec<[u16; GROUP]> },
    /// Q5_0 grouped for the AVX2 and AVX-512 kernels: `qs` as Q4_1x16's (the low four
    /// bits), `qh[g*nb + b][l]` row l's fifth bits (bit e for element e,
    /// as in ggml), `d` the scales.
    Q5_0x16 { qs: Vec<Lane64>, qh: Vec<[u32; GROUP]>, d: Vec<[u16; GROUP]> },
    /// Q4_K grouped for the AVX-512 kernel: for group g, super-block s and
    /// 32-value sub-block l (index u = (g*ns + s)*8 + l, ns = cols/256),
    /// `qs[u*4..u*4+4]` hold the sub-block's q as Q4_1x16 holds a block's,
    /// `sc[u][r]`, `m[u][r]` row r's sub-block scale and min, and
    /// `d[g*ns + s][r]`, `dmin[..][r]` its super-block scales.
    Q4Kx16 { qs: Vec<Lane64>, sc: Vec<[u8; GROUP]>, m: Vec<[u8; GROUP]>, d: Vec<[u16; GROUP]>, dmin: Vec<[u16; GROUP]> },
    /// Q6_K grouped for the AVX-512 kernel, indexed as Q4Kx16: `qs[u*8 + k]`
    /// holds in lane r row r's q (0..64, unsigned, a byte each: what
    /// `vpdpbusd` takes) of elements 4k..4k+3 of sub-block u; `sc[u*2 + h]`
    /// the scales of its two 16-value halves; `d` the super-block scales.
    /// A byte per weight where ggml stores 6.56 bits: prefill reads the
    /// matrix from cache, and the two high bits cost no unpacking.
    Q6Kx16 { qs: Vec<Lane64>, sc: Vec<[i8; GROUP]>, d: Vec<[u16; GROUP]> },
    /// ggml `block_q5_0` in planes: value = d * (q - 16), q in 0..32; the
    /// low four bits as Q4_1's nibbles, bit 4 of element j is bit j of qh.
    Q5_0 { qs: Vec<[u8; 16]>, qh: Vec<u32>, d: Vec<u16> },
    /// ggml `block_q4_K` super-blocks of 256 values (see `BlockQ4K`).
    Q4K { blocks: Vec<BlockQ4K> },
    /// ggml `block_q5_K` super-blocks (see `BlockQ5K`).
    Q5K { blocks: Vec<BlockQ5K> },
    /// ggml `block_q6_K` super-blocks, byte for byte (see `BlockQ6K`).
    Q6K { blocks: Vec<BlockQ6K> },
}

/// Values per k-quant super-block (ggml's QK_K).
pub const QK_K: usize = 256;

/// ggml `block_q4_K`: 8 sub-blocks of 32 values, value = d * sc[j] * q -
/// dmin * m[j] with q in 0..16. Sub-block 2i is the low nibbles of
/// qs[32i..32i+32], sub-block 2i+1 their high nibbles. The 6-bit scales and
/// mins ggml packs into 12 bytes are unpacked at load into `sc` and `m`
/// (148 bytes held per 256 weights instead of ggml's 144) so the kernels
/// read them with one load.
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct BlockQ4K {
    pub qs: [u8; 128],
    pub sc: [u8; 8],
    pub m: [u8; 8],
    pub d: u16,
    pub dmin: u16,
}

/// ggml `block_q5_K`: as Q4_K with a fifth bit per value, q in 0..32; bit 4
/// of element l of sub-block j is bit j of qh[l].
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct BlockQ5K {
    pub qs: [u8; 128],
    pub qh: [u8; 32],
    pub sc: [u8; 8],
    pub m: [u8; 8],
    pub d: u16,
    pub dmin: u16,
}

/// ggml `block_q6_K` as stored: 16 sub-blocks of 16 values, value = d *
/// sc[j] * (q - 32), q in 0..64 from four low bits in `ql` and two high
/// bits in `qh` (see `q6k_value`). 32-value block b of the super-block uses
/// scales sc[2b] (its first 16 values) and sc[2b + 1].
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct BlockQ6K {
    pub ql: [u8; 128],
    pub qh: [u8; 64],
    pub sc: [i8; 16],
    pub d: u16,
}

/// ggml's `get_scale_min_k4`: scale and min j of a k-quant's 12 packed bytes.
fn scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        ((q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4), (q[j + 4] >> 4) | ((q[j] >> 6) << 4))
    }
}

/// q (0..16) of element e (0..256) of a Q4_K super-block.
#[inline]
pub(crate) fn q4k_value(b: &BlockQ4K, e: usize) -> u8 {
    let (j, l) = (e / 64, e % 64);
    if l < 32 {
        b.qs[32 * j + l] & 0x0f
    } else {
        b.qs[32 * j + l - 32] >> 4
    }
}

/// q (0..32) of element e of a Q5_K super-block.
#[inline]
pub(crate) fn q5k_value(b: &BlockQ5K, e: usize) -> u8 {
    let (s, l) = (e / 32, e % 32);
    let lo = if s % 2 == 0 { b.qs[32 * (s / 2) + l] & 0x0f } else { b.qs[32 * (s / 2) + l] >> 4 };
    lo | (((b.qh[l] >> s) & 1) << 4)
}

/// q - 32 (-32..32) and the scale of element e of a Q6_K super-block.
#[inline]
pub(crate) fn q6k_value(b: &BlockQ6K, e: usize) -> (i8, i8) {
    let (n, l) = (e / 128, e % 128);
    let (t, ll) = (l / 32, l % 32);
    let ql = &b.ql[64 * n..];
    let qh = b.qh[32 * n + ll];
    let q = match t {
        0 => (ql[ll] & 0x0f) | ((qh & 3) << 4),
        1 => (ql[32 + ll] & 0x0f) | (((qh >> 2) & 3) << 4),
        2 => (ql[ll] >> 4) | (((qh >> 4) & 3) << 4),
        _ => (ql[32 + ll] >> 4) | (((qh >> 6) & 3) << 4),
    };
    (q as i8 - 32, b.sc[8 * n + ll / 16 + 2 * t])
}

/// q (0..32) of element j of a Q5_0 block.
#[inline]
pub(crate) fn q5_0_value(qs: &[u8; 16], qh: u32, j: usize) -> u8 {
    let lo = if j < 16 { qs[j] & 0x0f } else { qs[j - 16] >> 4 };
    lo | ((((qh >> j) & 1) as u8) << 4)
}

/// 64 bytes, cache-line aligned: one 512-bit vector of a packed matrix.
#[derive(Clone, Copy, Debug)]
#[repr(C, align(64))]
pub struct Lane64(pub [u8; 64]);

/// A row-major quantized weight matrix `[rows, cols]`; y = W x computes one
/// output per row. Block (r, b) is at index r * cols/32 + b of each plane.
#[derive(Clone, Debug)]
pub struct QMatrix {
    pub rows: usize,
    pub cols: usize,
    pub data: QData,
}

/// Activation rows quantized to 8 bits per 32-value block, in planes: qs,
/// scale d and s = d * sum(qs) (Q4_1's offset term needs it). Scales are
/// rounded through f16 as llama.cpp's Q8_1 stores them.
#[derive(Clone, Debug, Default)]
pub struct QActs {
    pub m: usize,
    pub nb: usize,
    pub qs: Vec<[i8; 32]>,
    pub d: Vec<f32>,
    pub s: Vec<f32>,
    /// Exact integer sum of each block's qs (the packed Q8_0 kernel removes
    /// the +128 weight offset with it).
    pub isum: Vec<i32>,
}

impl QMatrix {
    /// Wraps ggml-layout bytes of a Q4_1, Q5_0, Q8_0, Q4_K, Q5_K or Q6_K
    /// tensor; `None` for other types (or a width the type cannot have).
    pub fn from_ggml(dtype: &str, bytes: &[u8], rows: usize, cols: usize) -> Option<QMatrix> {
        if cols % QK != 0 {
            return None;
        }
        let nblocks = rows * cols / QK;
        let nsuper = rows * cols / QK_K;
        let kquant = matches!(dtype, "q4_k" | "q5_k" | "q6_k");
        if kquant && cols % QK_K != 0 {
            return None;
        }
        let f16at = |c: &[u8], o: usize| u16::from_le_bytes([c[o], c[o + 1]]);
        let data = match dtype {
            "q5_0" => {
                if bytes.len() != nblocks * 22 {
                    return None;
                }
                let (mut qs, mut qh, mut d) = (Vec::with_capacity(nblocks), Vec::with_capacity(nblocks), Vec::with_capacity(nblocks));
                for c in bytes.chunks_exact(22) {
                    d.push(f16at(c, 0));
                    qh.push(u32::from_le_bytes([c[2], c[3], c[4], c[5]]));
                    qs.push(c[6..22].try_into().unwrap());
                }
                QData::Q5_0 { qs, qh, d }
            }
            "q4_k" => {
                if bytes.len() != nsuper * 144 {
                    return None;
                }
                let blocks = bytes
                    .chunks_exact(144)
                    .map(|c| {
                        let mut b = BlockQ4K { qs: c[16..144].try_into().unwrap(), sc: [0; 8], m: [0; 8], d: f16at(c, 0), dmin: f16at(c, 2) };
                        for j in 0..8 {
                            (b.sc[j], b.m[j]) = scale_min_k4(j, &c[4..16]);
                        }
                        b
                    })
                    .collect();
                QData::Q4K { blocks }
            }
            "q5_k" => {
                if bytes.len() != nsuper * 176 {
                    return None;
                }
                let blocks = bytes
                    .chunks_exact(176)
                    .map(|c| {
                        let mut b = BlockQ5K {
                            qs: c[48..176].try_into().unwrap(),
                            qh: c[16..48].try_into().unwrap(),
                            sc: [0; 8],
                            m: [0; 8],
                            d: f16at(c, 0),
                            dmin: f16at(c, 2),
                        };
                        for j in 0..8 {
                            (b.sc[j], b.m[j]) = scale_min_k4(j, &c[4..16]);
                        }
                        b
                    })
                    .collect();
                QData::Q5K { blocks }
            }
            "q6_k" => {
                if bytes.len() != nsuper * 210 {
                    return None;
                }
                let blocks = bytes
                    .chunks_exact(210)
                    .map(|c| BlockQ6K {
                        ql: c[0..128].try_into().unwrap(),
                        qh: c[128..192].try_into().unwrap(),
                        sc: std::array::from_fn(|i| c[192 + i] as i8),
                        d: f16at(c, 208),
                    })
                    .collect();
                QData::Q6K { blocks }
            }
            "q4_1" => {
                if bytes.len() != nblocks * 20 {
                    return None;
                }
                let mut qs = Vec::with_capacity(nblocks);
                let mut d = Vec::with_capacity(nblocks);
                let mut m = Vec::with_capacity(nblocks);
                for c in bytes.chunks_exact(20) {
                    d.push(u16::from_le_bytes([c[0], c[1]]));
                    m.push(u16::from_le_bytes([c[2], c[3]]));
                    let mut q = [0u8; 16];
                    q.copy_from_slice(&c[4..20]);
                    qs.push(q);
                }
                QData::Q4_1 { qs, d, m }
            }
            "q8_0" => {
                if bytes.len() != nblocks * 34 {
                    return None;
                }
                let mut qs = Vec::with_capacity(nblocks);
                let mut d = Vec::with_capacity(nblocks);
                for c in bytes.chunks_exact(34) {
                    d.push(u16::from_le_bytes([c[0], c[1]]));
                    let mut q = [0i8; 32];
                    for (dst, src) in q.iter_mut().zip(&c[2..34]) {
                        *dst = *src as i8;
                    }
                    qs.push(q);
                }
                QData::Q8_0 { qs, d }
            }
            _ => return None,
        };
        Some(QMatrix { rows, cols, data })
    }

    /// Quantizes f32 weights to Q8_0 (the fallback for types without a kernel).
    pub fn quantize_q8_0(values: &[f32], rows: usize, cols: usize) -> QMatrix {
        assert_eq!(values.len(), rows * cols);
        assert_eq!(cols % QK, 0, "cols must be a multiple of {QK}");
        let mut qs = Vec::with_capacity(values.len() / QK);
        let mut d = Vec::with_capacity(values.len() / QK);
        for xb in values.chunks_exact(QK) {
            let amax = xb.iter().fold(0f32, |m, v| m.max(v.abs()));
            let dv = amax / 127.0;
            let id = if dv != 0.0 { 1.0 / dv } else { 0.0 };
            let mut q = [0i8; 32];
            for (qv, x) in q.iter_mut().zip(xb) {
                *qv = (x * id).round() as i8;
            }
            qs.push(q);
            d.push(f16::from_f32(dv).to_bits());
        }
        QMatrix { rows, cols, data: QData::Q8_0 { qs, d } }
    }

    pub fn dtype_name(&self) -> &'static str {
        match self.data {
            QData::Q4_1 { .. } | QData::Q4_1x16 { .. } => "q4_1",
            QData::Q8_0 { .. } | QData::Q8_0x16 { .. } => "q8_0",
            QData::Q5_0 { .. } | QData::Q5_0x16 { .. } => "q5_0",
            QData::Q4K { .. } | QData::Q4Kx16 { .. } => "q4_k",
            QData::Q5K { .. } => "q5_k",
            QData::Q6K { .. } | QData::Q6Kx16 { .. } => "q6_k",
        }
    }

    pub fn bytes(&self) -> usize {
        match &self.data {
            QData::Q4_1 { qs, .. } => qs.len() * 20,
            QData::Q8_0 { qs, .. } => qs.len() * 34,
            QData::Q4_1x16 { d, .. } => d.len() * GROUP * 20,
            QData::Q8_0x16 { d, .. } => d.len() * GROUP * 34,
            QData::Q5_0 { qs, .. } => qs.len() * 22,
            QData::Q5_0x16 { d, .. } => d.len() * GROUP * 22,
            QData::Q4K { blocks } => blocks.len() * std::mem::size_of::<BlockQ4K>(),
            QData::Q5K { blocks } => blocks.len() * std::mem::size_of::<BlockQ5K>(),
            QData::Q6K { blocks } => blocks.len() * std::mem::size_of::<BlockQ6K>(),
            QData::Q4Kx16 { d, .. } => d.len() * GROUP * std::mem::size_of::<BlockQ4K>(),
            QData::Q6Kx16 { qs, sc, d } => qs.len() * 64 + sc.len() * GROUP + d.len() * GROUP * 2,
        }
    }

    pub fn dequantize_row(&self, row: usize, out: &mut [f32]) {
        let nb = self.cols / QK;
        assert_eq!(out.len(), self.cols);
        let r = row * nb..(row + 1) * nb;
        match &self.data {
            QData::Q4_1 { qs, d, m } => {
                for (((q, &dv), &mv), o) in qs[r.clone()].iter().zip(&d[r.clone()]).zip(&m[r]).zip(out.chunks_exact_mut(QK)) {
                    let (dv, mv) = (f16_to_f32(dv), f16_to_f32(mv));
                    for j in 0..16 {
                        o[j] = dv * (q[j] & 0x0f) as f32 + mv;
                        o[j + 16] = dv * (q[j] >> 4) as f32 + mv;
                    }
                }
            }
            QData::Q8_0 { qs, d } => {
                for ((q, &dv), o) in qs[r.clone()].iter().zip(&d[r]).zip(out.chunks_exact_mut(QK)) {
                    let dv = f16_to_f32(dv);
                    for j in 0..QK {
                        o[j] = dv * q[j] as f32;
                    }
                }
            }
            QData::Q5_0 { qs, qh, d } => {
                for (((q, &h), &dv), o) in qs[r.clone()].iter().zip(&qh[r.clone()]).zip(&d[r]).zip(out.chunks_exact_mut(QK)) {
                    let dv = f16_to_f32(dv);
                    for (j, o) in o.iter_mut().enumerate() {
                        *o = dv * (q5_0_value(q, h, j) as i32 - 16) as f32;
                    }
                }
            }
            QData::Q4K { blocks } => {
                let ns = self.cols / QK_K;
                for (b, o) in blocks[row * ns..(row + 1) * ns].iter().zip(out.chunks_exact_mut(QK_K)) {
                    let (d, dmin) = (f16_to_f32(b.d), f16_to_f32(b.dmin));
                    for (e, o) in o.iter_mut().enumerate() {
                        let j = e / 32;
                        *o = d * b.sc[j] as f32 * q4k_value(b, e) as f32 - dmin * b.m[j] as f32;
                    }
                }
            }
            QData::Q5K { blocks } => {
                let ns = self.cols / QK_K;
                for (b, o) in blocks[row * ns..(row + 1) * ns].iter().zip(out.chunks_exact_mut(QK_K)) {
                    let (d, dmin) = (f16_to_f32(b.d), f16_to_f32(b.dmin));
                    for (e, o) in o.iter_mut().enumerate() {
                        let j = e / 32;
                        *o = d * b.sc[j] as f32 * q5k_value(b, e) as f32 - dmin * b.m[j] as f32;
                    }
                }
            }
            QData::Q6K { blocks } => {
                let ns = self.cols / QK_K;
                for (b, o) in blocks[row * ns..(row + 1) * ns].iter().zip(out.chunks_exact_mut(QK_K)) {
                    let d = f16_to_f32(b.d);
                    for (e, o) in o.iter_mut().enumerate() {
                        let (q, sc) = q6k_value(b, e);
                        *o = d * sc as f32 * q as f32;
                    }
                }
            }
            QData::Q4_1x16 { qs, d, m } => {
                let (g, l) = (row / GROUP, row % GROUP);
                for (b, o) in out.chunks_exact_mut(QK).enumerate() {
                    let gb = g * nb + b;
                    let (dv, mv) = (f16_to_f32(d[gb][l]), f16_to_f32(m[gb][l]));
                    for k in 0..4 {
                        for e in 0..4 {
                            let q = qs[gb * 4 + k].0[l * 4 + e];
                            o[4 * k + e] = dv * (q & 0x0f) as f32 + mv;
                            o[16 + 4 * k + e] = dv * (q >> 4) as f32 + mv;
                        }
                    }
                }
            }
            QData::Q5_0x16 { qs, qh, d } => {
                let (g, l) = (row / GROUP, row % GROUP);
                for (b, o) in out.chunks_exact_mut(QK).enumerate() {
                    let gb = g * nb + b;
                    let dv = f16_to_f32(d[gb][l]);
                    let mut q = [0u8; 16];
                    for k in 0..4 {
                        q[4 * k..4 * k + 4].copy_from_slice(&qs[gb * 4 + k].0[l * 4..l * 4 + 4]);
                    }
                    for (j, o) in o.iter_mut().enumerate() {
                        *o = dv * (q5_0_value(&q, qh[gb][l], j) as i32 - 16) as f32;
                    }
                }
            }
            QData::Q4Kx16 { qs, sc, m, d, dmin } => {
                let (ns, g, r) = (self.cols / QK_K, row / GROUP, row % GROUP);
                for (s, o) in out.chunks_exact_mut(QK_K).enumerate() {
                    let gs = g * ns + s;
                    let (dv, mv) = (f16_to_f32(d[gs][r]), f16_to_f32(dmin[gs][r]));
                    for l in 0..8 {
                        let u = gs * 8 + l;
                        for k in 0..4 {
                            for e in 0..4 {
                                let q = qs[u * 4 + k].0[r * 4 + e];
                                o[32 * l + 4 * k + e] = dv * sc[u][r] as f32 * (q & 0x0f) as f32 - mv * m[u][r] as f32;
                                o[32 * l + 16 + 4 * k + e] = dv * sc[u][r] as f32 * (q >> 4) as f32 - mv * m[u][r] as f32;
                            }
                        }
                    }
                }
            }
            QData::Q6Kx16 { qs, sc, d } => {
                let (ns, g, r) = (self.cols / QK_K, row / GROUP, row % GROUP);
                for (s, o) in out.chunks_exact_mut(QK_K).enumerate() {
                    let gs = g * ns + s;
                    let dv = f16_to_f32(d[gs][r]);
                    for l in 0..8 {
                        let u = gs * 8 + l;
                        for k in 0..8 {
                            for e in 0..4 {
                                let q = qs[u * 8 + k].0[r * 4 + e] as i8 - 32;
                                o[32 * l + 4 * k + e] = dv * sc[u * 2 + k / 4][r] as f32 * q as f32;
                            }
                        }
                    }
                }
            }
            QData::Q8_0x16 { qs, d } => {
                let (g, l) = (row / GROUP, row % GROUP);
                for (b, o) in out.chunks_exact_mut(QK).enumerate() {
                    let gb = g * nb + b;
                    let dv = f16_to_f32(d[gb][l]);
                    for k in 0..8 {
                        for e in 0..4 {
                            let q = qs[gb * 8 + k].0[l * 4 + e].wrapping_sub(128) as i8;
                            o[4 * k + e] = dv * q as f32;
                        }
                    }
                }
            }
        }
    }

    /// Whether the matrix is in the grouped layout of the AVX-512 kernel.
    pub fn is_packed(&self) -> bool {
        matches!(self.data, QData::Q4_1x16 { .. } | QData::Q8_0x16 { .. } | QData::Q5_0x16 { .. } | QData::Q4Kx16 { .. } | QData::Q6Kx16 { .. })
    }

    /// Repacks into the grouped layout when this CPU has a grouped kernel
    /// for the type (AVX-512 VNNI: Q4_1, Q5_0, Q8_0, Q4_K and Q6_K; AVX2: Q4_1 and Q5_0) and rows
    /// divide into groups; otherwise returns self as is.
    ///
    /// Why: the plain layout's kernel spends a conversion and an FMA on
    /// every (weight block, activation row) pair, so at batch 8 it is bound
    /// by those, not by the integer dots. With 16 weight rows side by side
    /// (one per 32-bit lane), each activation block is broadcast and eight
    /// `vpdpbusd` leave all 16 rows' full block dots in one register; the
    /// scaling is then one convert, one multiply and one FMA per 16 pairs.
    /// Same bytes per weight as ggml's format; the integer dots and scales
    /// are exactly those of the plain kernels.
    pub fn packed(self) -> QMatrix {
        let kernel = match isa() {
            Isa::Avx512Vnni => matches!(self.data, QData::Q4_1 { .. } | QData::Q8_0 { .. } | QData::Q5_0 { .. } | QData::Q4K { .. } | QData::Q6K { .. }),
            // AVX2 has grouped kernels for Q4_1 and Q5_0: without VNNI's
            // 32-bit accumulation, Q8_0's +128 bytes would overflow the
            // 16-bit pair sums (its plain kernel moves the sign instead).
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => matches!(self.data, QData::Q4_1 { .. } | QData::Q5_0 { .. }),
            _ => false,
        };
        if !kernel || self.rows % GROUP != 0 {
            return self;
        }
        self.packed_unchecked()
    }

    pub(crate) fn packed_unchecked(self) -> QMatrix {
        let nb = self.cols / QK;
        let ng = self.rows / GROUP;
        let data = match self.data {
            QData::Q4_1 { qs, d, m } => {
                let mut pq = vec![Lane64([0; 64]); ng * nb * 4];
                let mut pd = vec![[0u16; GROUP]; ng * nb];
                let mut pm = vec![[0u16; GROUP]; ng * nb];
                for g in 0..ng {
                    for b in 0..nb {
                        let gb = g * nb + b;
                        for l in 0..GROUP {
                            let src = (g * GROUP + l) * nb + b;
                            pd[gb][l] = d[src];
                            pm[gb][l] = m[src];
                            for k in 0..4 {
                                pq[gb * 4 + k].0[l * 4..l * 4 + 4].copy_from_slice(&qs[src][4 * k..4 * k + 4]);
                            }
                        }
                    }
                }
                QData::Q4_1x16 { qs: pq, d: pd, m: pm }
            }
            QData::Q8_0 { qs, d } => {
                let mut pq = vec![Lane64([0; 64]); ng * nb * 8];
                let mut pd = vec![[0u16; GROUP]; ng * nb];
                for g in 0..ng {
                    for b in 0..nb {
                        let gb = g * nb + b;
                        for l in 0..GROUP {
                            let src = (g * GROUP + l) * nb + b;
                            pd[gb][l] = d[src];
                            for k in 0..8 {
                                for e in 0..4 {
                                    pq[gb * 8 + k].0[l * 4 + e] = (qs[src][4 * k + e] as u8).wrapping_add(128);
                                }
                            }
                        }
                    }
                }
                QData::Q8_0x16 { qs: pq, d: pd }
            }
            QData::Q5_0 { qs, qh, d } => {
                let mut pq = vec![Lane64([0; 64]); ng * nb * 4];
                let mut ph = vec![[0u32; GROUP]; ng * nb];
                let mut pd = vec![[0u16; GROUP]; ng * nb];
                for g in 0..ng {
                    for b in 0..nb {
                        let gb = g * nb + b;
                        for l in 0..GROUP {
                            let src = (g * GROUP + l) * nb + b;
                            pd[gb][l] = d[src];
                            ph[gb][l] = qh[src];
                            for k in 0..4 {
                                pq[gb * 4 + k].0[l * 4..l * 4 + 4].copy_from_slice(&qs[src][4 * k..4 * k + 4]);
                            }
                        }
                    }
                }
                QData::Q5_0x16 { qs: pq, qh: ph, d: pd }
            }
            QData::Q4K { blocks } => {
                let ns = self.cols / QK_K;
                let mut pq = vec![Lane64([0; 64]); ng * ns * 8 * 4];
                let (mut psc, mut pm) = (vec![[0u8; GROUP]; ng * ns * 8], vec![[0u8; GROUP]; ng * ns * 8]);
                let (mut pd, mut pdm) = (vec![[0u16; GROUP]; ng * ns], vec![[0u16; GROUP]; ng * ns]);
                for g in 0..ng {
                    for s in 0..ns {
                        let gs = g * ns + s;
                        for r in 0..GROUP {
                            let b = &blocks[(g * GROUP + r) * ns + s];
                            pd[gs][r] = b.d;
                            pdm[gs][r] = b.dmin;
                            for l in 0..8 {
                                let u = gs * 8 + l;
                                psc[u][r] = b.sc[l];
                                pm[u][r] = b.m[l];
                                for k in 0..4 {
                                    for e in 0..4 {
                                        let (lo, hi) = (q4k_value(b, 32 * l + 4 * k + e), q4k_value(b, 32 * l + 16 + 4 * k + e));
                                        pq[u * 4 + k].0[r * 4 + e] = lo | (hi << 4);
                                    }
                                }
                            }
                        }
                    }
                }
                QData::Q4Kx16 { qs: pq, sc: psc, m: pm, d: pd, dmin: pdm }
            }
            QData::Q6K { blocks } => {
                let ns = self.cols / QK_K;
                let mut pq = vec![Lane64([0; 64]); ng * ns * 8 * 8];
                let mut psc = vec![[0i8; GROUP]; ng * ns * 8 * 2];
                let mut pd = vec![[0u16; GROUP]; ng * ns];
                for g in 0..ng {
                    for s in 0..ns {
                        let gs = g * ns + s;
                        for r in 0..GROUP {
                            let b = &blocks[(g * GROUP + r) * ns + s];
                            pd[gs][r] = b.d;
                            for l in 0..8 {
                                let u = gs * 8 + l;
                                for k in 0..8 {
                                    for e in 0..4 {
                                        let (q, sc) = q6k_value(b, 32 * l + 4 * k + e);
                                        pq[u * 8 + k].0[r * 4 + e] = (q + 32) as u8;
                                        psc[u * 2 + k / 4][r] = sc;
                                    }
                                }
                            }
                        }
                    }
                }
                QData::Q6Kx16 { qs: pq, sc: psc, d: pd }
            }
            other => other,
        };
        QMatrix { rows: self.rows, cols: self.cols, data }
    }

    pub fn dequantize(&self) -> Vec<f32> {
        let mut out = vec![0f32; self.rows * self.cols];
        for r in 0..self.rows {
            self.dequantize_row(r, &mut out[r * self.cols..(r + 1) * self.cols]);
        }
        out
    }

    /// Stacks matrices with the same width row-wise (e.g. q, k and v into one
    /// qkv projection, so one matmul and one thread fork serve all three).
    /// Takes plain-layout parts (pack the result, not the parts).
    pub fn concat_rows(parts: Vec<QMatrix>) -> QMatrix {
        let cols = parts[0].cols;
        let mut merged = QMatrix::merge_rows(parts);
        if merged.len() == 1 {
            return merged.pop().unwrap();
        }
        // Mixed types: one common type keeps the kernel simple.
        let rows = merged.iter().map(|p| p.rows).sum();
        let mut values = Vec::with_capacity(rows * cols);
        for p in &merged {
            values.extend(p.dequantize());
        }
        QMatrix::quantize_q8_0(&values, rows, cols)
    }

    /// Stacks runs of neighbouring plain-layout parts of the same type into
    /// one matrix each (all parts the same width); parts of different types
    /// stay apart (see `Stacked`).
    pub fn merge_rows(parts: Vec<QMatrix>) -> Vec<QMatrix> {
        let cols = parts[0].cols;
        assert!(parts.iter().all(|p| p.cols == cols));
        let mut out: Vec<QMatrix> = Vec::new();
        for p in parts {
            let Some(last) = out.last_mut() else {
                out.push(p);
                continue;
            };
            last.rows += p.rows;
            match (&mut last.data, p.data) {
                (QData::Q4_1 { qs, d, m }, QData::Q4_1 { qs: q2, d: d2, m: m2 }) => {
                    qs.extend(q2);
                    d.extend(d2);
                    m.extend(m2);
                }
                (QData::Q8_0 { qs, d }, QData::Q8_0 { qs: q2, d: d2 }) => {
                    qs.extend(q2);
                    d.extend(d2);
                }
                (QData::Q5_0 { qs, qh, d }, QData::Q5_0 { qs: q2, qh: h2, d: d2 }) => {
                    qs.extend(q2);
                    qh.extend(h2);
                    d.extend(d2);
                }
                (QData::Q4K { blocks }, QData::Q4K { blocks: b2 }) => blocks.extend(b2),
                (QData::Q5K { blocks }, QData::Q5K { blocks: b2 }) => blocks.extend(b2),
                (QData::Q6K { blocks }, QData::Q6K { blocks: b2 }) => blocks.extend(b2),
                (_, data) => {
                    last.rows -= p.rows;
                    out.push(QMatrix { rows: p.rows, cols, data });
                }
            }
        }
        out
    }
}
