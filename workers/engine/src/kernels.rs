//! Quantized CPU matmul kernels. Weights stay in ggml's block layout (Q4_1 is
//! kept as is, so decode reads as few bytes as llama.cpp does; anything else is
//! requantized to Q8_0), activations are quantized per call to 8 bits like
//! llama.cpp's Q8_1, and each weight row is multiplied against several
//! activation rows while it sits in L1, so a batch of B sequences reads the
//! weights once per step instead of B times.

use half::f16;

/// Values per quantization block (ggml's QK4_1 == QK8_0 == 32).
pub const QK: usize = 32;

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

/// Weight rows per packed group: one 32-bit lane of a 512-bit vector each.
pub const GROUP: usize = 16;

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

#[inline]
fn f16_to_f32(bits: u16) -> f32 {
    f16::from_bits(bits).to_f32()
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

/// Quantizes activation rows of width `k` into `out` (planes resized as
/// needed, so a caller that keeps `out` allocates only when the batch grows).
pub fn quantize_activations(x: &[f32], k: usize, out: &mut QActs) {
    assert_eq!(k % QK, 0);
    let nblocks = x.len() / QK;
    out.m = x.len() / k;
    out.nb = k / QK;
    out.qs.resize(nblocks, [0; 32]);
    out.d.resize(nblocks, 0.0);
    out.s.resize(nblocks, 0.0);
    out.isum.resize(nblocks, 0);
    // The per-block scalar loop below costs more than a small batch's
    // matmul share on this path; the AVX-512 version gives identical bytes
    // and scales (same max, same product, same rounding).
    #[cfg(target_arch = "x86_64")]
    if isa() == Isa::Avx512Vnni {
        // SAFETY: the ISA check above covers the function's features.
        unsafe { x86::quantize_blocks(x, &mut out.qs, &mut out.d, &mut out.s, &mut out.isum) };
        return;
    }
    quantize_scalar(x, out);
}

fn quantize_scalar(x: &[f32], out: &mut QActs) {
    for ((((xb, q), d), s), is) in
        x.chunks_exact(QK).zip(out.qs.iter_mut()).zip(out.d.iter_mut()).zip(out.s.iter_mut()).zip(out.isum.iter_mut())
    {
        let amax = xb.iter().fold(0f32, |m, v| m.max(v.abs()));
        let dv = amax / 127.0;
        let id = if dv != 0.0 { 1.0 / dv } else { 0.0 };
        let mut sum = 0i32;
        for (qv, v) in q.iter_mut().zip(xb) {
            let qi = (v * id).round() as i32;
            *qv = qi as i8;
            sum += qi;
        }
        *d = f16::from_f32(dv).to_f32();
        *s = f16::from_f32(dv * sum as f32).to_f32();
        *is = sum;
    }
}

/// A raw output pointer shared by tasks that write disjoint elements.
#[derive(Clone, Copy)]
pub(crate) struct SendPtr(pub(crate) *mut f32);
unsafe impl Send for SendPtr {}
unsafe impl Sync for SendPtr {}

/// Which kernel family runs; chosen once at runtime so a binary built without
/// `target-cpu=native` still uses AVX2 where the CPU has it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Isa {
    Scalar,
    #[cfg(target_arch = "x86_64")]
    Avx2,
    #[cfg(target_arch = "x86_64")]
    Avx512Vnni,
}

pub fn isa() -> Isa {
    static ISA: std::sync::OnceLock<Isa> = std::sync::OnceLock::new();
    *ISA.get_or_init(|| {
        if std::env::var("SWITCHYARD_FORCE_SCALAR").is_ok() {
            return Isa::Scalar;
        }
        #[cfg(target_arch = "x86_64")]
        {
            let avx2 = is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") && is_x86_feature_detected!("f16c");
            if avx2
                && is_x86_feature_detected!("avx512vnni")
                && is_x86_feature_detected!("avx512vl")
                && is_x86_feature_detected!("avx512bw")
                && std::env::var("SWITCHYARD_NO_VNNI").is_err()
            {
                return Isa::Avx512Vnni;
            }
            if avx2 {
                return Isa::Avx2;
            }
        }
        Isa::Scalar
    })
}

/// Activation rows handled per pass over a weight row.
const TILE: usize = 8;
/// Activation rows kept hot while a thread walks its weight rows (prefill).
const MBLOCK: usize = 64;

/// out[i][r] = dot(W[r], a[i]) for every activation row; `out` is `[a.m, w.rows]`.
pub fn matmul(w: &QMatrix, a: &QActs, out: &mut [f32]) {
    let n = w.rows;
    let m = a.m;
    let nb = w.cols / QK;
    assert_eq!(a.nb, nb, "activation width");
    assert_eq!(out.len(), m * n, "output size");
    if m == 0 || n == 0 {
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if w.is_packed() {
        return matmul_packed(w, a, out);
    }
    let threads = rayon::current_num_threads().max(1);
    // Enough chunks per thread to even out stragglers, few enough that the
    // fork/join overhead stays small next to the work.
    let chunk = n.div_ceil(threads * 4).clamp(16, 1024);
    let nchunks = n.div_ceil(chunk);
    let out_ptr = SendPtr(out.as_mut_ptr());
    let isa = isa();
    let work = |c: usize| {
        let p = out_ptr;
        let r0 = c * chunk;
        let r1 = (r0 + chunk).min(n);
        let mut mb = 0;
        while mb < m {
            let me = (mb + MBLOCK).min(m);
            for r in r0..r1 {
                let mut i = mb;
                while i < me {
                    let t = (me - i).min(TILE);
                    let mut res = [0f32; TILE];
                    dot_tile(isa, w, r, a, i, t, &mut res);
                    for (j, v) in res.iter().enumerate().take(t) {
                        // SAFETY: (i + j, r) is written by exactly one task:
                        // tasks own disjoint row ranges [r0, r1).
                        unsafe { *p.0.add((i + j) * n + r) = *v };
                    }
                    i += t;
                }
            }
            mb = me;
        }
    };
    crate::par::pool().run(nchunks, &work);
}

/// One weight row against `t` activation rows; the kernels take the row's
/// planes and the tile's planes (rows back to back, nb blocks each).
struct Tile<'a> {
    nb: usize,
    aq: &'a [[i8; 32]],
    ad: &'a [f32],
    asum: &'a [f32],
}

macro_rules! by_rows {
    ($t:expr, $f:ident, $($arg:expr),*) => {
        match $t {
            8 => $f::<8>($($arg),*),
            7 => $f::<7>($($arg),*),
            6 => $f::<6>($($arg),*),
            5 => $f::<5>($($arg),*),
            4 => $f::<4>($($arg),*),
            3 => $f::<3>($($arg),*),
            2 => $f::<2>($($arg),*),
            _ => $f::<1>($($arg),*),
        }
    };
}

#[inline]
fn dot_tile(isa: Isa, w: &QMatrix, r: usize, a: &QActs, i0: usize, t: usize, out: &mut [f32; TILE]) {
    let nb = a.nb;
    let rows = i0 * nb..(i0 + t) * nb;
    let tile = Tile { nb, aq: &a.qs[rows.clone()], ad: &a.d[rows.clone()], asum: &a.s[rows] };
    let wr = r * nb..(r + 1) * nb;
    match &w.data {
        QData::Q4_1 { qs, d, m } => {
            let (wq, wd, wm) = (&qs[wr.clone()], &d[wr.clone()], &m[wr]);
            match isa {
                #[cfg(target_arch = "x86_64")]
                Isa::Avx512Vnni => unsafe {
                    use x86::q4_1_vnni as k;
                    by_rows!(t, k, wq, wd, wm, &tile, out)
                },
                #[cfg(target_arch = "x86_64")]
                Isa::Avx2 => unsafe {
                    use x86::q4_1_avx2 as k;
                    by_rows!(t, k, wq, wd, wm, &tile, out)
                },
                Isa::Scalar => scalar_q4_1(wq, wd, wm, &tile, t, out),
            }
        }
        QData::Q8_0 { qs, d } => {
            let (wq, wd) = (&qs[wr.clone()], &d[wr]);
            match isa {
                #[cfg(target_arch = "x86_64")]
                Isa::Avx512Vnni => unsafe {
                    use x86::q8_0_vnni as k;
                    by_rows!(t, k, wq, wd, &tile, out)
                },
                #[cfg(target_arch = "x86_64")]
                Isa::Avx2 => unsafe {
                    use x86::q8_0_avx2 as k;
                    by_rows!(t, k, wq, wd, &tile, out)
                },
                Isa::Scalar => scalar_q8_0(wq, wd, &tile, t, out),
            }
        }
        QData::Q4_1x16 { .. } | QData::Q8_0x16 { .. } => unreachable!("packed matrices go through matmul_packed"),
    }
}

/// `matmul` for the grouped layout (`QMatrix::packed`, AVX-512 VNNI only).
/// Tasks own runs of 16-row groups; within a task each group's blocks stay
/// in L1 while up to 8 activation rows at a time pass over them, and every
/// pass writes 16 contiguous outputs per activation row.
#[cfg(target_arch = "x86_64")]
fn matmul_packed(w: &QMatrix, a: &QActs, out: &mut [f32]) {
    let (n, m, nb) = (w.rows, a.m, a.nb);
    let ng = n / GROUP;
    let threads = rayon::current_num_threads().max(1);
    let gchunk = ng.div_ceil(threads * 4).clamp(1, 64);
    let nchunks = ng.div_ceil(gchunk);
    let out_ptr = SendPtr(out.as_mut_ptr());
    let work = |c: usize| {
        let p = out_ptr;
        let g0 = c * gchunk;
        let g1 = (g0 + gchunk).min(ng);
        let mut mb = 0;
        while mb < m {
            let me = (mb + MBLOCK).min(m);
            for g in g0..g1 {
                let mut i = mb;
                while i < me {
                    let t = (me - i).min(TILE);
                    // SAFETY: the kernel writes out[(i..i+t) * n + 16g ..
                    // +16], inside `out` (asserted sizes) and owned by this
                    // task alone (disjoint groups).
                    unsafe {
                        let o = p.0.add(i * n + g * GROUP);
                        match &w.data {
                            QData::Q4_1x16 { qs, d, m: wm } => {
                                let (q, d, wm) = (qs[g * nb * 4..].as_ptr(), d[g * nb..].as_ptr(), wm[g * nb..].as_ptr());
                                use x86::q4_1_x16 as k;
                                by_rows!(t, k, q, d, wm, a, i, o, n)
                            }
                            QData::Q8_0x16 { qs, d } => {
                                let (q, d) = (qs[g * nb * 8..].as_ptr(), d[g * nb..].as_ptr());
                                use x86::q8_0_x16 as k;
                                by_rows!(t, k, q, d, a, i, o, n)
                            }
                            _ => unreachable!(),
                        }
                    }
                    i += t;
                }
            }
            mb = me;
        }
    };
    crate::par::pool().run(nchunks, &work);
}

fn scalar_q4_1(wq: &[[u8; 16]], wd: &[u16], wm: &[u16], a: &Tile, t: usize, out: &mut [f32; TILE]) {
    let nb = a.nb;
    for j in 0..t {
        let mut acc = 0f32;
        for b in 0..nb {
            let (q, x) = (&wq[b], &a.aq[j * nb + b]);
            let mut isum = 0i32;
            for k in 0..16 {
                isum += (q[k] & 0x0f) as i32 * x[k] as i32 + (q[k] >> 4) as i32 * x[k + 16] as i32;
            }
            acc += f16_to_f32(wd[b]) * a.ad[j * nb + b] * isum as f32 + f16_to_f32(wm[b]) * a.asum[j * nb + b];
        }
        out[j] = acc;
    }
}

fn scalar_q8_0(wq: &[[i8; 32]], wd: &[u16], a: &Tile, t: usize, out: &mut [f32; TILE]) {
    let nb = a.nb;
    for j in 0..t {
        let mut acc = 0f32;
        for b in 0..nb {
            let isum: i32 = wq[b].iter().zip(&a.aq[j * nb + b]).map(|(&x, &y)| x as i32 * y as i32).sum();
            acc += f16_to_f32(wd[b]) * a.ad[j * nb + b] * isum as f32;
        }
        out[j] = acc;
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{Tile, TILE};
    use std::arch::x86_64::*;

    /// `super::scores16_heads` on AVX-512 for H heads (and `scores16` for
    /// one): 8 partial sums per head (8H zmm), one key load per dimension
    /// for all heads; multiply and add kept separate (no FMA) so the rounding
    /// matches the portable loop.
    #[target_feature(enable = "avx512f")]
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn scores16_heads_avx512<const H: usize>(
        qs: &[f32],
        hd: usize,
        kt: *const half::f16,
        stride: usize,
        p0: usize,
        scale: f32,
        out: *mut f32,
        out_stride: usize,
    ) {
        let key = |d: usize| _mm512_cvtph_ps(_mm256_loadu_si256(kt.add(d * stride + p0) as *const __m256i));
        let mut acc = [[_mm512_setzero_ps(); 8]; H];
        let n8 = hd / 8 * 8;
        for d8 in (0..n8).step_by(8) {
            for c in 0..8 {
                let k = key(d8 + c);
                for h in 0..H {
                    acc[h][c] = _mm512_add_ps(acc[h][c], _mm512_mul_ps(_mm512_set1_ps(qs[h * hd + d8 + c]), k));
                }
            }
        }
        for h in 0..H {
            let mut dot = _mm512_setzero_ps();
            for a in acc[h] {
                dot = _mm512_add_ps(dot, a);
            }
            for d in n8..hd {
                dot = _mm512_add_ps(dot, _mm512_mul_ps(_mm512_set1_ps(qs[h * hd + d]), key(d)));
            }
            _mm512_storeu_ps(out.add(h * out_stride), _mm512_mul_ps(dot, _mm512_set1_ps(scale)));
        }
    }

    /// `super::weighted_values64` on AVX-512 for H heads (4H zmm sums).
    #[target_feature(enable = "avx512f")]
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn weighted_values64_avx512<const H: usize>(
        w: *const f32,
        w_stride: usize,
        n: usize,
        vc: *const half::f16,
        kvd: usize,
        voff: usize,
        out: *mut f32,
        hd: usize,
    ) {
        let mut acc = [[_mm512_setzero_ps(); 4]; H];
        for j in 0..n {
            let v = vc.add(j * kvd + voff);
            let ld = |o: usize| _mm512_cvtph_ps(_mm256_loadu_si256(v.add(o) as *const __m256i));
            let vs = [ld(0), ld(16), ld(32), ld(48)];
            for h in 0..H {
                let wj = _mm512_set1_ps(*w.add(h * w_stride + j));
                for c in 0..4 {
                    acc[h][c] = _mm512_add_ps(acc[h][c], _mm512_mul_ps(wj, vs[c]));
                }
            }
        }
        for h in 0..H {
            for c in 0..4 {
                _mm512_storeu_ps(out.add(h * hd + c * 16), acc[h][c]);
            }
        }
    }

    /// `super::scores16` on AVX2: each 16-lane sum as two ymm halves.
    #[target_feature(enable = "avx2,f16c")]
    pub unsafe fn scores16_avx2(q: &[f32], kt: *const half::f16, stride: usize, p0: usize, scale: f32, out: &mut [f32; 16]) {
        let hd = q.len();
        let n8 = hd / 8 * 8;
        for half in 0..2 {
            let key = |d: usize| _mm256_cvtph_ps(_mm_loadu_si128(kt.add(d * stride + p0 + half * 8) as *const __m128i));
            let mut acc = [_mm256_setzero_ps(); 8];
            for d8 in (0..n8).step_by(8) {
                for (c, a) in acc.iter_mut().enumerate() {
                    *a = _mm256_add_ps(*a, _mm256_mul_ps(_mm256_set1_ps(q[d8 + c]), key(d8 + c)));
                }
            }
            let mut dot = _mm256_setzero_ps();
            for a in acc {
                dot = _mm256_add_ps(dot, a);
            }
            for d in n8..hd {
                dot = _mm256_add_ps(dot, _mm256_mul_ps(_mm256_set1_ps(q[d]), key(d)));
            }
            _mm256_storeu_ps(out.as_mut_ptr().add(half * 8), _mm256_mul_ps(dot, _mm256_set1_ps(scale)));
        }
    }

    #[inline(always)]
    unsafe fn hsum(v: __m256) -> f32 {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
        _mm_cvtss_f32(s)
    }

    #[inline(always)]
    unsafe fn unpack_q4(q: &[u8; 16]) -> __m256i {
        let qs = _mm_loadu_si128(q.as_ptr() as *const __m128i);
        let mask = _mm_set1_epi8(0x0f);
        let lo = _mm_and_si128(qs, mask);
        let hi = _mm_and_si128(_mm_srli_epi16(qs, 4), mask);
        _mm256_set_m128i(hi, lo)
    }

    #[inline(always)]
    unsafe fn f16x8(p: *const u16) -> __m256 {
        _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i))
    }

    #[inline(always)]
    unsafe fn f16x1(v: u16) -> __m128 {
        _mm_cvtph_ps(_mm_cvtsi32_si128(v as i32))
    }

    // Blocks go in groups of eight: the group's weight scales convert with
    // one F16C instruction, the eight combined scales d_w * d_a of each row
    // come from one multiply, and Q4_1's offset term m_w * s_a is one FMA per
    // row and group. Per block and row what is left is the integer dot, one
    // int->float conversion and one FMA with a broadcast scale. A scalar tail
    // handles nb % 8 blocks.
    macro_rules! q4_1_kernel {
        ($name:ident, $features:literal, $dot:ident) => {
            #[target_feature(enable = $features)]
            pub unsafe fn $name<const R: usize>(
                wq: &[[u8; 16]],
                wd: &[u16],
                wm: &[u16],
                a: &Tile,
                out: &mut [f32; TILE],
            ) {
                let nb = a.nb;
                let mut acc = [_mm256_setzero_ps(); R];
                let mut macc = [_mm256_setzero_ps(); R];
                let mut sc = [[0f32; 8]; R];
                let mut b = 0;
                while b + 8 <= nb {
                    let d8 = f16x8(wd.as_ptr().add(b));
                    let m8 = f16x8(wm.as_ptr().add(b));
                    for j in 0..R {
                        let o = j * nb + b;
                        _mm256_storeu_ps(sc[j].as_mut_ptr(), _mm256_mul_ps(d8, _mm256_loadu_ps(a.ad.as_ptr().add(o))));
                        macc[j] = _mm256_fmadd_ps(m8, _mm256_loadu_ps(a.asum.as_ptr().add(o)), macc[j]);
                    }
                    for k in 0..8 {
                        let w = unpack_q4(wq.get_unchecked(b + k));
                        for j in 0..R {
                            let x = _mm256_loadu_si256(a.aq.get_unchecked(j * nb + b + k).as_ptr() as *const __m256i);
                            let p = $dot(w, x);
                            acc[j] = _mm256_fmadd_ps(_mm256_broadcast_ss(&sc[j][k]), _mm256_cvtepi32_ps(p), acc[j]);
                        }
                    }
                    b += 8;
                }
                let mut tail = [_mm_setzero_ps(); R];
                while b < nb {
                    let d = f16x1(*wd.get_unchecked(b));
                    let m = f16x1(*wm.get_unchecked(b));
                    let w = unpack_q4(wq.get_unchecked(b));
                    for j in 0..R {
                        let o = j * nb + b;
                        let s = _mm_mul_ss(d, _mm_load_ss(a.ad.as_ptr().add(o)));
                        tail[j] = _mm_fmadd_ss(m, _mm_load_ss(a.asum.as_ptr().add(o)), tail[j]);
                        let x = _mm256_loadu_si256(a.aq.get_unchecked(o).as_ptr() as *const __m256i);
                        acc[j] = _mm256_fmadd_ps(_mm256_broadcastss_ps(s), _mm256_cvtepi32_ps($dot(w, x)), acc[j]);
                    }
                    b += 1;
                }
                for j in 0..R {
                    out[j] = hsum(_mm256_add_ps(acc[j], macc[j])) + _mm_cvtss_f32(tail[j]);
                }
            }
        };
    }

    macro_rules! q8_0_kernel {
        ($name:ident, $features:literal, $dot:ident) => {
            #[target_feature(enable = $features)]
            pub unsafe fn $name<const R: usize>(wq: &[[i8; 32]], wd: &[u16], a: &Tile, out: &mut [f32; TILE]) {
                let nb = a.nb;
                let mut acc = [_mm256_setzero_ps(); R];
                let mut sc = [[0f32; 8]; R];
                let mut b = 0;
                while b + 8 <= nb {
                    let d8 = f16x8(wd.as_ptr().add(b));
                    for j in 0..R {
                        let o = j * nb + b;
                        _mm256_storeu_ps(sc[j].as_mut_ptr(), _mm256_mul_ps(d8, _mm256_loadu_ps(a.ad.as_ptr().add(o))));
                    }
                    for k in 0..8 {
                        let w = _mm256_loadu_si256(wq.get_unchecked(b + k).as_ptr() as *const __m256i);
                        // The integer dots want unsigned x signed: move w's
                        // sign onto the activations.
                        let wabs = _mm256_sign_epi8(w, w);
                        for j in 0..R {
                            let x = _mm256_loadu_si256(a.aq.get_unchecked(j * nb + b + k).as_ptr() as *const __m256i);
                            let p = $dot(wabs, _mm256_sign_epi8(x, w));
                            acc[j] = _mm256_fmadd_ps(_mm256_broadcast_ss(&sc[j][k]), _mm256_cvtepi32_ps(p), acc[j]);
                        }
                    }
                    b += 8;
                }
                while b < nb {
                    let d = f16x1(*wd.get_unchecked(b));
                    let w = _mm256_loadu_si256(wq.get_unchecked(b).as_ptr() as *const __m256i);
                    let wabs = _mm256_sign_epi8(w, w);
                    for j in 0..R {
                        let o = j * nb + b;
                        let s = _mm_mul_ss(d, _mm_load_ss(a.ad.as_ptr().add(o)));
                        let x = _mm256_loadu_si256(a.aq.get_unchecked(o).as_ptr() as *const __m256i);
                        let p = $dot(wabs, _mm256_sign_epi8(x, w));
                        acc[j] = _mm256_fmadd_ps(_mm256_broadcastss_ps(s), _mm256_cvtepi32_ps(p), acc[j]);
                    }
                    b += 1;
                }
                for j in 0..R {
                    out[j] = hsum(acc[j]);
                }
            }
        };
    }

    /// u8 x i8 dot of 32 pairs into 8 i32 lanes (AVX2: maddubs + madd).
    #[inline(always)]
    unsafe fn dot_avx2(u: __m256i, s: __m256i) -> __m256i {
        _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1))
    }

    /// The same with one AVX-512 VNNI instruction.
    #[inline(always)]
    unsafe fn dot_vnni(u: __m256i, s: __m256i) -> __m256i {
        _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s)
    }

    /// `quantize_activations` for whole blocks: q = round(x / d) with
    /// round-half-away-from-zero done as trunc(v + copysign(0.5 - 2^-25, v)),
    /// the lowering LLVM uses for `f32::round`, so bytes equal the scalar's.
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
    pub unsafe fn quantize_blocks(x: &[f32], qs: &mut [[i8; 32]], d: &mut [f32], s: &mut [f32], isum: &mut [i32]) {
        use half::f16;
        let half = _mm512_castps_si512(_mm512_set1_ps(f32::from_bits(0x3eff_ffff)));
        let sign = _mm512_set1_epi32(i32::MIN);
        let round = |v: __m512| {
            let h = _mm512_or_si512(_mm512_and_si512(_mm512_castps_si512(v), sign), half);
            _mm512_cvttps_epi32(_mm512_add_ps(v, _mm512_castsi512_ps(h)))
        };
        for (b, xb) in x.chunks_exact(32).enumerate() {
            let x0 = _mm512_loadu_ps(xb.as_ptr());
            let x1 = _mm512_loadu_ps(xb.as_ptr().add(16));
            let amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(x0), _mm512_abs_ps(x1)));
            let dv = amax / 127.0;
            let id = if dv != 0.0 { 1.0 / dv } else { 0.0 };
            let idv = _mm512_set1_ps(id);
            let r0 = round(_mm512_mul_ps(x0, idv));
            let r1 = round(_mm512_mul_ps(x1, idv));
            let q = qs.get_unchecked_mut(b).as_mut_ptr() as *mut __m128i;
            _mm_storeu_si128(q, _mm512_cvtepi32_epi8(r0));
            _mm_storeu_si128(q.add(1), _mm512_cvtepi32_epi8(r1));
            let sum = _mm512_reduce_add_epi32(_mm512_add_epi32(r0, r1));
            *d.get_unchecked_mut(b) = f16::from_f32(dv).to_f32();
            *s.get_unchecked_mut(b) = f16::from_f32(dv * sum as f32).to_f32();
            *isum.get_unchecked_mut(b) = sum;
        }
    }

    // Grouped-layout kernels: one 16-row weight group against R activation
    // rows. Per block, the weight group is 4 (Q4_1, unpacked to 8) or 8
    // (Q8_0) vectors; per activation row, 8 `vpdpbusd` with the row's 4-byte
    // pieces broadcast give the 16 block dots, then one convert, a multiply
    // by d_w * d_a and an FMA (Q4_1 adds m_w * s_a with one more FMA).
    // Results for activation row j go to out[j * n .. j * n + 16].

    #[inline(always)]
    unsafe fn bcast4(p: *const [i8; 32], k: usize) -> __m512i {
        _mm512_set1_epi32(std::ptr::read_unaligned((p as *const i32).add(k)))
    }

    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
    pub unsafe fn q4_1_x16<const R: usize>(
        qs: *const super::Lane64,
        wd: *const [u16; 16],
        wm: *const [u16; 16],
        a: &super::QActs,
        i0: usize,
        out: *mut f32,
        n: usize,
    ) {
        let nb = a.nb;
        let aq = a.qs.as_ptr().add(i0 * nb);
        let ad = a.d.as_ptr().add(i0 * nb);
        let asum = a.s.as_ptr().add(i0 * nb);
        let mask = _mm512_set1_epi8(0x0f);
        let mut acc = [_mm512_setzero_ps(); R];
        let mut macc = [_mm512_setzero_ps(); R];
        for b in 0..nb {
            let p = qs.add(b * 4) as *const __m512i;
            let (p0, p1, p2, p3) = (_mm512_load_si512(p), _mm512_load_si512(p.add(1)), _mm512_load_si512(p.add(2)), _mm512_load_si512(p.add(3)));
            let w = [
                _mm512_and_si512(p0, mask),
                _mm512_and_si512(p1, mask),
                _mm512_and_si512(p2, mask),
                _mm512_and_si512(p3, mask),
                _mm512_and_si512(_mm512_srli_epi16(p0, 4), mask),
                _mm512_and_si512(_mm512_srli_epi16(p1, 4), mask),
                _mm512_and_si512(_mm512_srli_epi16(p2, 4), mask),
                _mm512_and_si512(_mm512_srli_epi16(p3, 4), mask),
            ];
            let sw = _mm512_cvtph_ps(_mm256_loadu_si256(wd.add(b) as *const __m256i));
            let mw = _mm512_cvtph_ps(_mm256_loadu_si256(wm.add(b) as *const __m256i));
            for j in 0..R {
                let o = j * nb + b;
                let x = aq.add(o);
                let mut s = _mm512_setzero_si512();
                for (k, wk) in w.iter().enumerate() {
                    s = _mm512_dpbusd_epi32(s, *wk, bcast4(x, k));
                }
                let scale = _mm512_mul_ps(sw, _mm512_set1_ps(*ad.add(o)));
                acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), scale, acc[j]);
                macc[j] = _mm512_fmadd_ps(mw, _mm512_set1_ps(*asum.add(o)), macc[j]);
            }
        }
        for j in 0..R {
            _mm512_storeu_ps(out.add(j * n), _mm512_add_ps(acc[j], macc[j]));
        }
    }

    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
    pub unsafe fn q8_0_x16<const R: usize>(
        qs: *const super::Lane64,
        wd: *const [u16; 16],
        a: &super::QActs,
        i0: usize,
        out: *mut f32,
        n: usize,
    ) {
        let nb = a.nb;
        let aq = a.qs.as_ptr().add(i0 * nb);
        let ad = a.d.as_ptr().add(i0 * nb);
        let ai = a.isum.as_ptr().add(i0 * nb);
        let mut acc = [_mm512_setzero_ps(); R];
        for b in 0..nb {
            let p = qs.add(b * 8) as *const __m512i;
            let mut w = [_mm512_setzero_si512(); 8];
            for (k, wk) in w.iter_mut().enumerate() {
                *wk = _mm512_load_si512(p.add(k));
            }
            let sw = _mm512_cvtph_ps(_mm256_loadu_si256(wd.add(b) as *const __m256i));
            for j in 0..R {
                let o = j * nb + b;
                let x = aq.add(o);
                // Weights are stored as q + 128: start from -128 * sum(x)
                // so the sum comes out as the signed dot.
                let mut s = _mm512_set1_epi32(-128 * *ai.add(o));
                for (k, wk) in w.iter().enumerate() {
                    s = _mm512_dpbusd_epi32(s, *wk, bcast4(x, k));
                }
                let scale = _mm512_mul_ps(sw, _mm512_set1_ps(*ad.add(o)));
                acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), scale, acc[j]);
            }
        }
        for j in 0..R {
            _mm512_storeu_ps(out.add(j * n), acc[j]);
        }
    }

    q4_1_kernel!(q4_1_avx2, "avx2,fma,f16c", dot_avx2);
    q4_1_kernel!(q4_1_vnni, "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni", dot_vnni);
    q8_0_kernel!(q8_0_avx2, "avx2,fma,f16c", dot_avx2);
    q8_0_kernel!(q8_0_vnni, "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni", dot_vnni);
}

/// Attention scores of one query head against 16 consecutive positions of
/// transposed keys: `out[i] = scale * dot(q, key p0 + i)`, where element d of
/// the key at position p is `kt[d * stride + p]`. Eight partial sums (dims
/// d % 8) are added up in order at the end: the same arithmetic, in the same
/// order, as `dot_f32` per position (scores are bit-identical to a plain
/// dot), with eight independent add chains instead of one.
///
/// # Safety
/// `kt` must hold `q.len() * stride` floats and `p0 + 16 <= stride`.
pub unsafe fn scores16(q: &[f32], kt: *const f16, stride: usize, p0: usize, scale: f32, out: &mut [f32; 16]) {
    match isa() {
        // Written with intrinsics: LLVM turns the portable loop below into
        // scalar code through the stack, which made attention a quarter of
        // a batch-8 decode step.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512Vnni => x86::scores16_heads_avx512::<1>(q, q.len(), kt, stride, p0, scale, out.as_mut_ptr(), 16),
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => x86::scores16_avx2(q, kt, stride, p0, scale, out),
        Isa::Scalar => scores16_portable(q, kt, stride, p0, scale, out),
    }
}

/// `scores16` for `qs.len() / hd` query heads (1..=3) that share one KV
/// head (grouped-query attention): each key block is loaded once for all of
/// them. Head h's 16 scores go to `out[h * out_stride..][..16]`; per head
/// the arithmetic is exactly `scores16`'s.
///
/// # Safety
/// As `scores16`, and `out` must hold `(heads - 1) * out_stride + 16` floats.
pub unsafe fn scores16_heads(qs: &[f32], hd: usize, kt: *const f16, stride: usize, p0: usize, scale: f32, out: *mut f32, out_stride: usize) {
    let heads = qs.len() / hd;
    #[cfg(target_arch = "x86_64")]
    if isa() == Isa::Avx512Vnni {
        return match heads {
            1 => x86::scores16_heads_avx512::<1>(qs, hd, kt, stride, p0, scale, out, out_stride),
            2 => x86::scores16_heads_avx512::<2>(qs, hd, kt, stride, p0, scale, out, out_stride),
            3 => x86::scores16_heads_avx512::<3>(qs, hd, kt, stride, p0, scale, out, out_stride),
            _ => panic!("scores16_heads takes 1 to 3 heads, got {heads}"),
        };
    }
    // Narrower vectors have too few registers to hold several heads' sums.
    for h in 0..heads {
        let o = &mut *(out.add(h * out_stride) as *mut [f32; 16]);
        scores16(&qs[h * hd..(h + 1) * hd], kt, stride, p0, scale, o);
    }
}

/// Attention output for `heads` (1..=3) query heads sharing a KV head, 64
/// dims at a time: `out[h * hd + i] = sum_j w[h * w_stride + j] * v_j[i]`
/// over positions j in order, v_j = `vc[j * kvd + voff..][..64]`, i < 64.
/// Multiply and add are separate, so per element it is the same arithmetic
/// as an axpy per position; each value row is loaded once for all heads.
///
/// # Safety
/// `w` holds `heads * w_stride` floats, `n <= w_stride`; `vc` holds
/// `(n - 1) * kvd + voff + 64` floats; `out` holds `(heads - 1) * hd + 64`.
#[allow(clippy::too_many_arguments)]
pub unsafe fn weighted_values64(heads: usize, w: *const f32, w_stride: usize, n: usize, vc: *const f16, kvd: usize, voff: usize, out: *mut f32, hd: usize) {
    #[cfg(target_arch = "x86_64")]
    if isa() == Isa::Avx512Vnni {
        return match heads {
            1 => x86::weighted_values64_avx512::<1>(w, w_stride, n, vc, kvd, voff, out, hd),
            2 => x86::weighted_values64_avx512::<2>(w, w_stride, n, vc, kvd, voff, out, hd),
            3 => x86::weighted_values64_avx512::<3>(w, w_stride, n, vc, kvd, voff, out, hd),
            _ => panic!("weighted_values64 takes 1 to 3 heads, got {heads}"),
        };
    }
    for h in 0..heads {
        let mut acc = [0f32; 64];
        for j in 0..n {
            let wj = *w.add(h * w_stride + j);
            let v = (*(vc.add(j * kvd + voff) as *const [f16; 64])).map(f16::to_f32);
            for i in 0..64 {
                acc[i] += wj * v[i];
            }
        }
        std::ptr::copy_nonoverlapping(acc.as_ptr(), out.add(h * hd), 64);
    }
}

unsafe fn scores16_portable(q: &[f32], kt: *const f16, stride: usize, p0: usize, scale: f32, out: &mut [f32; 16]) {
    let hd = q.len();
    let key = |d: usize| (*(kt.add(d * stride + p0) as *const [f16; 16])).map(f16::to_f32);
    let mut acc = [[0f32; 16]; 8];
    let n8 = hd / 8 * 8;
    for d8 in (0..n8).step_by(8) {
        for (c, a) in acc.iter_mut().enumerate() {
            let (qd, k) = (q[d8 + c], key(d8 + c));
            for i in 0..16 {
                a[i] += qd * k[i];
            }
        }
    }
    let mut dot = [0f32; 16];
    for a in &acc {
        for i in 0..16 {
            dot[i] += a[i];
        }
    }
    for d in n8..hd {
        let (qd, k) = (q[d], key(d));
        for i in 0..16 {
            dot[i] += qd * k[i];
        }
    }
    for i in 0..16 {
        out[i] = dot[i] * scale;
    }
}

/// Plain f32 helpers used around the matmuls. Written as 8-wide chunks so
/// LLVM vectorizes the reductions without fast-math.
pub fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let n8 = a.len() / 8 * 8;
    for i in (0..n8).step_by(8) {
        for c in 0..8 {
            acc[c] += a[i + c] * b[i + c];
        }
    }
    let mut s: f32 = acc.iter().sum();
    for i in n8..a.len() {
        s += a[i] * b[i];
    }
    s
}

/// out += alpha * x
pub fn axpy(alpha: f32, x: &[f32], out: &mut [f32]) {
    for (o, v) in out.iter_mut().zip(x) {
        *o += alpha * v;
    }
}

/// y = x / rms(x) * w (llama.cpp's RMSNorm: mean of squares, then eps).
pub fn rms_norm(x: &[f32], w: &[f32], eps: f32, y: &mut [f32]) {
    let sum: f32 = {
        let mut acc = [0f32; 8];
        let n8 = x.len() / 8 * 8;
        for i in (0..n8).step_by(8) {
            for c in 0..8 {
                acc[c] += x[i + c] * x[i + c];
            }
        }
        acc.iter().sum::<f32>() + x[n8..].iter().map(|v| v * v).sum::<f32>()
    };
    let scale = 1.0 / (sum / x.len() as f32 + eps).sqrt();
    for ((o, v), g) in y.iter_mut().zip(x).zip(w) {
        *o = v * scale * g;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lcg(seed: &mut u64) -> f32 {
        *seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((*seed >> 33) as f32 / (1u64 << 31) as f32) * 2.0 - 1.0
    }

    /// Every ISA's attention scores equal the portable loop bit for bit,
    /// and the portable loop equals `dot_f32` per position.
    #[test]
    fn scores16_variants_are_bit_identical() {
        let mut seed = 7u64;
        for hd in [64usize, 72, 5] {
            let stride = 48;
            let q: Vec<f32> = (0..hd).map(|_| lcg(&mut seed)).collect();
            let kt: Vec<f16> = (0..hd * stride).map(|_| f16::from_f32(lcg(&mut seed))).collect();
            for p0 in [0usize, 16, 32] {
                let mut want = [0f32; 16];
                unsafe { scores16_portable(&q, kt.as_ptr(), stride, p0, 0.125, &mut want) };
                for i in 0..16 {
                    let key: Vec<f32> = (0..hd).map(|d| kt[d * stride + p0 + i].to_f32()).collect();
                    assert_eq!(want[i].to_bits(), (dot_f32(&q, &key) * 0.125).to_bits(), "portable vs dot_f32, hd {hd}");
                }
                let mut got = [0f32; 16];
                unsafe { scores16(&q, kt.as_ptr(), stride, p0, 0.125, &mut got) };
                assert_eq!(got.map(f32::to_bits), want.map(f32::to_bits), "{:?}, hd {hd}, p0 {p0}", isa());
                #[cfg(target_arch = "x86_64")]
                if is_x86_feature_detected!("avx2") {
                    unsafe { x86::scores16_avx2(&q, kt.as_ptr(), stride, p0, 0.125, &mut got) };
                    assert_eq!(got.map(f32::to_bits), want.map(f32::to_bits), "avx2, hd {hd}, p0 {p0}");
                }
            }
        }
    }

    /// Heads sharing a KV head get exactly what they get one at a time.
    #[test]
    fn grouped_attention_kernels_equal_per_head() {
        let mut seed = 11u64;
        let (hd, stride, n, kvd, voff) = (64usize, 48usize, 37usize, 192usize, 64usize);
        let kt: Vec<f16> = (0..hd * stride).map(|_| f16::from_f32(lcg(&mut seed))).collect();
        let vc: Vec<f16> = (0..n * kvd).map(|_| f16::from_f32(lcg(&mut seed))).collect();
        let vf: Vec<f32> = vc.iter().map(|v| v.to_f32()).collect();
        for heads in 1..=3usize {
            let qs: Vec<f32> = (0..heads * hd).map(|_| lcg(&mut seed)).collect();
            let mut got = vec![0f32; heads * stride];
            unsafe { scores16_heads(&qs, hd, kt.as_ptr(), stride, 16, 0.125, got.as_mut_ptr().add(16), stride) };
            for h in 0..heads {
                let mut want = [0f32; 16];
                unsafe { scores16_portable(&qs[h * hd..(h + 1) * hd], kt.as_ptr(), stride, 16, 0.125, &mut want) };
                assert_eq!(got[h * stride + 16..h * stride + 32].iter().map(|v| v.to_bits()).collect::<Vec<_>>(), want.map(f32::to_bits), "scores, {heads} heads, head {h}");
            }
            let w: Vec<f32> = (0..heads * stride).map(|_| lcg(&mut seed).abs()).collect();
            let mut out = vec![0f32; heads * hd];
            unsafe { weighted_values64(heads, w.as_ptr(), stride, n, vc.as_ptr(), kvd, voff, out.as_mut_ptr(), hd) };
            for h in 0..heads {
                let mut want = vec![0f32; 64];
                for j in 0..n {
                    axpy(w[h * stride + j], &vf[j * kvd + voff..j * kvd + voff + 64], &mut want);
                }
                assert_eq!(out[h * hd..h * hd + 64].iter().map(|v| v.to_bits()).collect::<Vec<_>>(), want.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), "values, {heads} heads, head {h}");
            }
        }
    }

    fn random_q4_1(rows: usize, cols: usize, seed: &mut u64) -> QMatrix {
        let mut bytes = Vec::new();
        for _ in 0..rows * cols / QK {
            bytes.extend_from_slice(&f16::from_f32(lcg(seed).abs() * 0.1).to_le_bytes());
            bytes.extend_from_slice(&f16::from_f32(lcg(seed) * 0.5).to_le_bytes());
            for _ in 0..16 {
                bytes.push(((lcg(seed) + 1.0) * 127.9) as u8);
            }
        }
        QMatrix::from_ggml("q4_1", &bytes, rows, cols).unwrap()
    }

    fn reference(w: &QMatrix, x: &[f32], m: usize) -> Vec<f32> {
        let wf = w.dequantize();
        let mut out = vec![0f32; m * w.rows];
        for i in 0..m {
            for r in 0..w.rows {
                out[i * w.rows + r] = dot_f32(&wf[r * w.cols..(r + 1) * w.cols], &x[i * w.cols..(i + 1) * w.cols]);
            }
        }
        out
    }

    fn check(w: &QMatrix, m: usize, seed: &mut u64) {
        let x: Vec<f32> = (0..m * w.cols).map(|_| lcg(seed)).collect();
        let mut act = QActs::default();
        quantize_activations(&x, w.cols, &mut act);
        let mut out = vec![0f32; m * w.rows];
        matmul(w, &act, &mut out);
        let want = reference(w, &x, m);
        let scale = want.iter().fold(0f32, |a, v| a.max(v.abs()));
        for (g, e) in out.iter().zip(&want) {
            assert!((g - e).abs() <= 0.02 * scale + 1e-3, "got {g}, want {e} (scale {scale})");
        }
        // Every kernel family computes the same integer dots, so the scalar
        // path must agree with the SIMD one to rounding.
        for i in 0..m {
            for r in 0..w.rows {
                let mut res = [0f32; TILE];
                dot_tile(Isa::Scalar, w, r, &act, i, 1, &mut res);
                let g = out[i * w.rows + r];
                assert!((g - res[0]).abs() <= 1e-4 * scale.max(1.0), "simd {g} vs scalar {}", res[0]);
            }
        }
        // The grouped layout (where this CPU has its kernel) holds the same
        // values and computes the same integer dots.
        let wp = w.clone().packed();
        if wp.is_packed() {
            let (mut r0, mut r1) = (vec![0f32; w.cols], vec![0f32; w.cols]);
            for r in 0..w.rows {
                w.dequantize_row(r, &mut r0);
                wp.dequantize_row(r, &mut r1);
                assert_eq!(r0, r1, "packed row {r}");
            }
            let mut outp = vec![0f32; m * w.rows];
            matmul(&wp, &act, &mut outp);
            for (g, e) in outp.iter().zip(&out) {
                assert!((g - e).abs() <= 1e-4 * scale.max(1.0), "packed {g} vs plain {e}");
            }
        }
    }

    #[test]
    fn q4_1_matmul_matches_reference() {
        let mut seed = 7;
        // Widths with only a tail (96), only whole groups of 8 blocks (256)
        // and both (576).
        for cols in [96, 256, 576] {
            // 67 rows stay in the plain layout; 48 pack into 16-row groups.
            for rows in [67, 48] {
                let w = random_q4_1(rows, cols, &mut seed);
                for m in [1, 2, 3, 4, 5, 9, 70] {
                    check(&w, m, &mut seed);
                }
            }
        }
    }

    #[test]
    fn q8_0_matmul_matches_reference() {
        let mut seed = 11;
        for cols in [128, 256, 576] {
            for rows in [45, 32] {
                let vals: Vec<f32> = (0..rows * cols).map(|_| lcg(&mut seed)).collect();
                let w = QMatrix::quantize_q8_0(&vals, rows, cols);
                for m in [1, 4, 6, 67] {
                    check(&w, m, &mut seed);
                }
            }
        }
    }

    #[test]
    fn simd_quantize_matches_scalar() {
        let mut seed = 5;
        // Random values plus exact .5 ties after scaling (block max 127).
        let mut x: Vec<f32> = (0..64 * 32).map(|_| lcg(&mut seed) * 3.0).collect();
        for b in 0..8 {
            x[b * 32] = 127.0;
            for j in 1..32 {
                x[b * 32 + j] = (j as f32 - 16.0) * 4.0 + 0.5;
            }
        }
        x[40 * 32..41 * 32].fill(0.0);
        let mut a = QActs::default();
        let mut b = QActs::default();
        quantize_activations(&x, 32 * 4, &mut a);
        quantize_activations(&x, 32 * 4, &mut b);
        quantize_scalar(&x, &mut b);
        assert_eq!(a.qs, b.qs);
        assert_eq!(a.d, b.d);
        assert_eq!(a.s, b.s);
        assert_eq!(a.isum, b.isum);
    }

    #[test]
    fn concat_rows_keeps_rows() {
        let mut seed = 3;
        let a = random_q4_1(3, 64, &mut seed);
        let b = random_q4_1(2, 64, &mut seed);
        let c = QMatrix::concat_rows(vec![a.clone(), b.clone()]);
        assert_eq!(c.rows, 5);
        let mut r = vec![0f32; 64];
        let mut e = vec![0f32; 64];
        c.dequantize_row(4, &mut r);
        b.dequantize_row(1, &mut e);
        assert_eq!(r, e);
    }
}

