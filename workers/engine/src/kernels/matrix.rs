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
    /// Q4_1 repacked for the AVX-512 VNNI kernel (see `QMatrix::packed`):
    /// rows in groups of `GROUP`, and for group g and block b the vectors
    /// `qs[(g*nb + b)*4 + k]` hold, in 4-byte lane l, bytes 4k..4k+4 of row
    /// 16g+l's block (low nibbles: elements 4k..4k+3, high nibbles: elements
    /// 16+4k..16+4k+3). `d[g*nb + b][l]`, `m[..][l]` are row l's scales.
    Q4_1x16 { qs: Vec<Lane64>, d: Vec<[u16; GROUP]>, m: Vec<[u16; GROUP]> },
    /// Q8_0 repacked the same way, 8 vectors per (group, block), each value
    /// stored as q + 128 (an unsigned byte, what VNNI's first operand takes).
    Q8_0x16 { qs: Vec<Lane64>, d: Vec<[u16; GROUP]> },
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
    /// Wraps ggml-layout bytes of a Q4_1 or Q8_0 tensor; `None` for other types.
    pub fn from_ggml(dtype: &str, bytes: &[u8], rows: usize, cols: usize) -> Option<QMatrix> {
        if cols % QK != 0 {
            return None;
        }
        let nblocks = rows * cols / QK;
        let data = match dtype {
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
        }
    }

    pub fn bytes(&self) -> usize {
        match &self.data {
            QData::Q4_1 { qs, .. } => qs.len() * 20,
            QData::Q8_0 { qs, .. } => qs.len() * 34,
            QData::Q4_1x16 { d, .. } => d.len() * GROUP * 20,
            QData::Q8_0x16 { d, .. } => d.len() * GROUP * 34,
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
        matches!(self.data, QData::Q4_1x16 { .. } | QData::Q8_0x16 { .. })
    }

    /// Repacks into the grouped layout when this CPU runs the AVX-512 VNNI
    /// kernel (and rows divide into groups); otherwise returns self as is.
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
        if isa() != Isa::Avx512Vnni || self.rows % GROUP != 0 {
            return self;
        }
        self.packed_unchecked()
    }

    fn packed_unchecked(self) -> QMatrix {
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
        assert!(parts.iter().all(|p| p.cols == cols));
        let rows = parts.iter().map(|p| p.rows).sum();
        if parts.iter().all(|p| matches!(p.data, QData::Q4_1 { .. })) {
            let (mut aq, mut ad, mut am) = (Vec::new(), Vec::new(), Vec::new());
            for p in parts {
                if let QData::Q4_1 { qs, d, m } = p.data {
                    aq.extend(qs);
                    ad.extend(d);
                    am.extend(m);
                }
            }
            return QMatrix { rows, cols, data: QData::Q4_1 { qs: aq, d: ad, m: am } };
        }
        if parts.iter().all(|p| matches!(p.data, QData::Q8_0 { .. })) {
            let (mut aq, mut ad) = (Vec::new(), Vec::new());
            for p in parts {
                if let QData::Q8_0 { qs, d } = p.data {
                    aq.extend(qs);
                    ad.extend(d);
                }
            }
            return QMatrix { rows, cols, data: QData::Q8_0 { qs: aq, d: ad } };
        }
        // Mixed types: one common type keeps the kernel simple.
        let mut values = Vec::with_capacity(rows * cols);
        for p in &parts {
            values.extend(p.dequantize());
        }
        QMatrix::quantize_q8_0(&values, rows, cols)
    }
}
