//! Quantized CPU matmul kernels. Weights stay in ggml's block layout (Q4_1 is
//! kept as is, so decode reads as few bytes as llama.cpp does; anything else is
//! requantized to Q8_0), activations are quantized per call to 8 bits like
//! llama.cpp's Q8_1, and each weight row is multiplied against several
//! activation rows while it sits in L1, so a batch of B sequences reads the
//! weights once per step instead of B times.

use half::f16;
use rayon::prelude::*;

/// Values per quantization block (ggml's QK4_1 == QK8_0 == 32).
pub const QK: usize = 32;

/// ggml `block_q4_1`: value = d * q + m, q in 0..16; element j is the low
/// nibble of qs[j], element j+16 the high nibble.
#[derive(Clone, Copy, Debug, Default)]
#[repr(C)]
pub struct BlockQ4_1 {
    pub d: u16,
    pub m: u16,
    pub qs: [u8; 16],
}

/// ggml `block_q8_0`: value = d * q.
#[derive(Clone, Copy, Debug, Default)]
#[repr(C)]
pub struct BlockQ8_0 {
    pub d: u16,
    pub qs: [i8; 32],
}

/// One block of a quantized activation row (llama.cpp's Q8_1 with the scales
/// kept as f32 after rounding through f16, as llama.cpp stores them): d is the
/// scale, s = d * sum(qs) serves Q4_1's offset term.
#[derive(Clone, Copy, Debug, Default)]
#[repr(C)]
pub struct BlockQ8Act {
    pub d: f32,
    pub s: f32,
    pub qs: [i8; 32],
}

#[derive(Clone, Debug)]
pub enum QData {
    Q4_1(Vec<BlockQ4_1>),
    Q8_0(Vec<BlockQ8_0>),
}

/// A row-major quantized weight matrix `[rows, cols]`; y = W x computes one
/// output per row.
#[derive(Clone, Debug)]
pub struct QMatrix {
    pub rows: usize,
    pub cols: usize,
    pub data: QData,
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
                QData::Q4_1(
                    bytes
                        .chunks_exact(20)
                        .map(|c| {
                            let mut qs = [0u8; 16];
                            qs.copy_from_slice(&c[4..20]);
                            BlockQ4_1 { d: u16::from_le_bytes([c[0], c[1]]), m: u16::from_le_bytes([c[2], c[3]]), qs }
                        })
                        .collect(),
                )
            }
            "q8_0" => {
                if bytes.len() != nblocks * 34 {
                    return None;
                }
                QData::Q8_0(
                    bytes
                        .chunks_exact(34)
                        .map(|c| {
                            let mut qs = [0i8; 32];
                            for (dst, src) in qs.iter_mut().zip(&c[2..34]) {
                                *dst = *src as i8;
                            }
                            BlockQ8_0 { d: u16::from_le_bytes([c[0], c[1]]), qs }
                        })
                        .collect(),
                )
            }
            _ => return None,
        };
        Some(QMatrix { rows, cols, data })
    }

    /// Quantizes f32 weights to Q8_0 (the fallback for types without a kernel).
    pub fn quantize_q8_0(values: &[f32], rows: usize, cols: usize) -> QMatrix {
        assert_eq!(values.len(), rows * cols);
        assert_eq!(cols % QK, 0, "cols must be a multiple of {QK}");
        let blocks = values
            .chunks_exact(QK)
            .map(|xb| {
                let amax = xb.iter().fold(0f32, |m, v| m.max(v.abs()));
                let d = amax / 127.0;
                let id = if d != 0.0 { 1.0 / d } else { 0.0 };
                let mut qs = [0i8; 32];
                for (q, x) in qs.iter_mut().zip(xb) {
                    *q = (x * id).round() as i8;
                }
                BlockQ8_0 { d: f16::from_f32(d).to_bits(), qs }
            })
            .collect();
        QMatrix { rows, cols, data: QData::Q8_0(blocks) }
    }

    pub fn dtype_name(&self) -> &'static str {
        match self.data {
            QData::Q4_1(_) => "q4_1",
            QData::Q8_0(_) => "q8_0",
        }
    }

    pub fn bytes(&self) -> usize {
        match &self.data {
            QData::Q4_1(b) => b.len() * std::mem::size_of::<BlockQ4_1>(),
            QData::Q8_0(b) => b.len() * std::mem::size_of::<BlockQ8_0>(),
        }
    }

    pub fn dequantize_row(&self, row: usize, out: &mut [f32]) {
        let nb = self.cols / QK;
        assert_eq!(out.len(), self.cols);
        match &self.data {
            QData::Q4_1(b) => {
                for (blk, o) in b[row * nb..(row + 1) * nb].iter().zip(out.chunks_exact_mut(QK)) {
                    let d = f16_to_f32(blk.d);
                    let m = f16_to_f32(blk.m);
                    for j in 0..16 {
                        o[j] = d * (blk.qs[j] & 0x0f) as f32 + m;
                        o[j + 16] = d * (blk.qs[j] >> 4) as f32 + m;
                    }
                }
            }
            QData::Q8_0(b) => {
                for (blk, o) in b[row * nb..(row + 1) * nb].iter().zip(out.chunks_exact_mut(QK)) {
                    let d = f16_to_f32(blk.d);
                    for j in 0..QK {
                        o[j] = d * blk.qs[j] as f32;
                    }
                }
            }
        }
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
    pub fn concat_rows(parts: Vec<QMatrix>) -> QMatrix {
        let cols = parts[0].cols;
        assert!(parts.iter().all(|p| p.cols == cols));
        let rows = parts.iter().map(|p| p.rows).sum();
        if parts.iter().all(|p| matches!(p.data, QData::Q4_1(_))) {
            let mut blocks = Vec::new();
            for p in parts {
                if let QData::Q4_1(b) = p.data {
                    blocks.extend(b);
                }
            }
            return QMatrix { rows, cols, data: QData::Q4_1(blocks) };
        }
        if parts.iter().all(|p| matches!(p.data, QData::Q8_0(_))) {
            let mut blocks = Vec::new();
            for p in parts {
                if let QData::Q8_0(b) = p.data {
                    blocks.extend(b);
                }
            }
            return QMatrix { rows, cols, data: QData::Q8_0(blocks) };
        }
        // Mixed types: one common type keeps the kernel simple.
        let mut values = Vec::with_capacity(rows * cols);
        for p in &parts {
            values.extend(p.dequantize());
        }
        QMatrix::quantize_q8_0(&values, rows, cols)
    }
}

/// Quantizes `m` activation rows of width `k` into `out` (resized as needed,
/// so a caller that keeps `out` allocates only when the batch grows).
pub fn quantize_activations(x: &[f32], k: usize, out: &mut Vec<BlockQ8Act>) {
    assert_eq!(k % QK, 0);
    let nblocks = x.len() / QK;
    out.resize(nblocks, BlockQ8Act::default());
    let quantize = |xb: &[f32], ob: &mut BlockQ8Act| {
        let amax = xb.iter().fold(0f32, |m, v| m.max(v.abs()));
        let d = amax / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        let mut sum = 0i32;
        for (q, v) in ob.qs.iter_mut().zip(xb) {
            let qi = (v * id).round() as i32;
            *q = qi as i8;
            sum += qi;
        }
        ob.d = f16::from_f32(d).to_f32();
        ob.s = f16::from_f32(d * sum as f32).to_f32();
    };
    if nblocks >= 4096 {
        x.par_chunks_exact(QK).zip(out.par_iter_mut()).for_each(|(xb, ob)| quantize(xb, ob));
    } else {
        for (xb, ob) in x.chunks_exact(QK).zip(out.iter_mut()) {
            quantize(xb, ob);
        }
    }
}

#[derive(Clone, Copy)]
struct SendPtr(*mut f32);
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
            if is_x86_feature_detected!("avx512vnni")
                && is_x86_feature_detected!("avx512vl")
                && is_x86_feature_detected!("avx512bw")
                && is_x86_feature_detected!("avx2")
                && is_x86_feature_detected!("fma")
                && is_x86_feature_detected!("f16c")
                && std::env::var("SWITCHYARD_NO_VNNI").is_err()
            {
                return Isa::Avx512Vnni;
            }
            if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") && is_x86_feature_detected!("f16c") {
                return Isa::Avx2;
            }
        }
        Isa::Scalar
    })
}

/// Rows of activations handled per pass over a weight row.
const TILE: usize = 4;
/// Activation rows kept hot while a thread walks its weight rows (prefill).
const MBLOCK: usize = 64;

/// out[i][r] = dot(W[r], a[i]) for `m` activation rows; `out` is `[m, w.rows]`.
pub fn matmul(w: &QMatrix, a: &[BlockQ8Act], m: usize, out: &mut [f32]) {
    let n = w.rows;
    let nb = w.cols / QK;
    assert_eq!(a.len(), m * nb, "activation blocks");
    assert_eq!(out.len(), m * n, "output size");
    if m == 0 || n == 0 {
        return;
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
                    dot_tile(isa, w, r, &a[i * nb..(i + t) * nb], nb, t, &mut res);
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
    if nchunks == 1 || threads == 1 {
        (0..nchunks).for_each(work);
    } else {
        (0..nchunks).into_par_iter().for_each(work);
    }
}

#[inline]
fn dot_tile(isa: Isa, w: &QMatrix, r: usize, a: &[BlockQ8Act], nb: usize, t: usize, out: &mut [f32; TILE]) {
    match &w.data {
        QData::Q4_1(b) => {
            let wr = &b[r * nb..(r + 1) * nb];
            match isa {
                #[cfg(target_arch = "x86_64")]
                Isa::Avx512Vnni => unsafe {
                    match t {
                        4 => x86::q4_1_vnni::<4>(wr, a, nb, out),
                        3 => x86::q4_1_vnni::<3>(wr, a, nb, out),
                        2 => x86::q4_1_vnni::<2>(wr, a, nb, out),
                        _ => x86::q4_1_vnni::<1>(wr, a, nb, out),
                    }
                },
                #[cfg(target_arch = "x86_64")]
                Isa::Avx2 => unsafe {
                    match t {
                        4 => x86::q4_1_avx2::<4>(wr, a, nb, out),
                        3 => x86::q4_1_avx2::<3>(wr, a, nb, out),
                        2 => x86::q4_1_avx2::<2>(wr, a, nb, out),
                        _ => x86::q4_1_avx2::<1>(wr, a, nb, out),
                    }
                },
                Isa::Scalar => scalar_q4_1(wr, a, nb, t, out),
            }
        }
        QData::Q8_0(b) => {
            let wr = &b[r * nb..(r + 1) * nb];
            match isa {
                #[cfg(target_arch = "x86_64")]
                Isa::Avx512Vnni => unsafe {
                    match t {
                        4 => x86::q8_0_vnni::<4>(wr, a, nb, out),
                        3 => x86::q8_0_vnni::<3>(wr, a, nb, out),
                        2 => x86::q8_0_vnni::<2>(wr, a, nb, out),
                        _ => x86::q8_0_vnni::<1>(wr, a, nb, out),
                    }
                },
                #[cfg(target_arch = "x86_64")]
                Isa::Avx2 => unsafe {
                    match t {
                        4 => x86::q8_0_avx2::<4>(wr, a, nb, out),
                        3 => x86::q8_0_avx2::<3>(wr, a, nb, out),
                        2 => x86::q8_0_avx2::<2>(wr, a, nb, out),
                        _ => x86::q8_0_avx2::<1>(wr, a, nb, out),
                    }
                },
                Isa::Scalar => scalar_q8_0(wr, a, nb, t, out),
            }
        }
    }
}

fn scalar_q4_1(w: &[BlockQ4_1], a: &[BlockQ8Act], nb: usize, t: usize, out: &mut [f32; TILE]) {
    for j in 0..t {
        let mut acc = 0f32;
        for b in 0..nb {
            let blk = &w[b];
            let ab = &a[j * nb + b];
            let mut isum = 0i32;
            for k in 0..16 {
                isum += (blk.qs[k] & 0x0f) as i32 * ab.qs[k] as i32;
                isum += (blk.qs[k] >> 4) as i32 * ab.qs[k + 16] as i32;
            }
            acc += f16_to_f32(blk.d) * ab.d * isum as f32 + f16_to_f32(blk.m) * ab.s;
        }
        out[j] = acc;
    }
}

fn scalar_q8_0(w: &[BlockQ8_0], a: &[BlockQ8Act], nb: usize, t: usize, out: &mut [f32; TILE]) {
    for j in 0..t {
        let mut acc = 0f32;
        for b in 0..nb {
            let blk = &w[b];
            let ab = &a[j * nb + b];
            let mut isum = 0i32;
            for k in 0..QK {
                isum += blk.qs[k] as i32 * ab.qs[k] as i32;
            }
            acc += f16_to_f32(blk.d) * ab.d * isum as f32;
        }
        out[j] = acc;
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{BlockQ4_1, BlockQ8Act, BlockQ8_0, TILE};
    use std::arch::x86_64::*;

    #[inline(always)]
    unsafe fn hsum(v: __m256) -> f32 {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
        _mm_cvtss_f32(s)
    }

    #[inline(always)]
    unsafe fn unpack_q4(blk: &BlockQ4_1) -> __m256i {
        let qs = _mm_loadu_si128(blk.qs.as_ptr() as *const __m128i);
        let mask = _mm_set1_epi8(0x0f);
        let lo = _mm_and_si128(qs, mask);
        let hi = _mm_and_si128(_mm_srli_epi16(qs, 4), mask);
        _mm256_set_m128i(hi, lo)
    }

    #[inline(always)]
    unsafe fn f16(bits: u16) -> f32 {
        _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(bits as i32)))
    }

    /// [d, m, 0, 0] of a Q4_1 block header in one F16C conversion.
    #[inline(always)]
    unsafe fn dm_vec(blk: &BlockQ4_1) -> __m128 {
        _mm_cvtph_ps(_mm_cvtsi32_si128(((blk.m as u32) << 16 | blk.d as u32) as i32))
    }

    /// [da, sa, 0, 0] of an activation block (d and s are adjacent).
    #[inline(always)]
    unsafe fn ds_vec(ab: &BlockQ8Act) -> __m128 {
        _mm_castpd_ps(_mm_load_sd(&ab.d as *const f32 as *const f64))
    }

    // The m * sa term is accumulated in lane 1 of an SSE register (lane 0
    // carries d * da for the broadcast). Written as scalar code, LLVM turned
    // it into a gather across the tile's rows, which costs more than the dot.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn q4_1_avx2<const R: usize>(w: &[BlockQ4_1], a: &[BlockQ8Act], nb: usize, out: &mut [f32; TILE]) {
        let ones = _mm256_set1_epi16(1);
        let mut acc = [_mm256_setzero_ps(); R];
        let mut accm = [_mm_setzero_ps(); R];
        for b in 0..nb {
            let blk = w.get_unchecked(b);
            let dmv = dm_vec(blk);
            let wq = unpack_q4(blk);
            for j in 0..R {
                let ab = a.get_unchecked(j * nb + b);
                let prod = _mm_mul_ps(dmv, ds_vec(ab));
                let aq = _mm256_loadu_si256(ab.qs.as_ptr() as *const __m256i);
                let p = _mm256_madd_epi16(_mm256_maddubs_epi16(wq, aq), ones);
                acc[j] = _mm256_fmadd_ps(_mm256_broadcastss_ps(prod), _mm256_cvtepi32_ps(p), acc[j]);
                accm[j] = _mm_add_ps(accm[j], prod);
            }
        }
        for j in 0..R {
            out[j] = hsum(acc[j]) + _mm_cvtss_f32(_mm_shuffle_ps(accm[j], accm[j], 1));
        }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn q8_0_avx2<const R: usize>(w: &[BlockQ8_0], a: &[BlockQ8Act], nb: usize, out: &mut [f32; TILE]) {
        let ones = _mm256_set1_epi16(1);
        let mut acc = [_mm256_setzero_ps(); R];
        for b in 0..nb {
            let blk = w.get_unchecked(b);
            let d = f16(blk.d);
            let wq = _mm256_loadu_si256(blk.qs.as_ptr() as *const __m256i);
            // maddubs wants unsigned x signed: move w's sign onto a.
            let wabs = _mm256_sign_epi8(wq, wq);
            for j in 0..R {
                let ab = a.get_unchecked(j * nb + b);
                let aq = _mm256_loadu_si256(ab.qs.as_ptr() as *const __m256i);
                let sa = _mm256_sign_epi8(aq, wq);
                let p = _mm256_madd_epi16(_mm256_maddubs_epi16(wabs, sa), ones);
                acc[j] = _mm256_fmadd_ps(_mm256_set1_ps(d * ab.d), _mm256_cvtepi32_ps(p), acc[j]);
            }
        }
        for j in 0..R {
            out[j] = hsum(acc[j]);
        }
    }

    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")]
    pub unsafe fn q4_1_vnni<const R: usize>(w: &[BlockQ4_1], a: &[BlockQ8Act], nb: usize, out: &mut [f32; TILE]) {
        let mut acc = [_mm256_setzero_ps(); R];
        let mut accm = [_mm_setzero_ps(); R];
        for b in 0..nb {
            let blk = w.get_unchecked(b);
            let dmv = dm_vec(blk);
            let wq = unpack_q4(blk);
            for j in 0..R {
                let ab = a.get_unchecked(j * nb + b);
                let prod = _mm_mul_ps(dmv, ds_vec(ab));
                let aq = _mm256_loadu_si256(ab.qs.as_ptr() as *const __m256i);
                let p = _mm256_dpbusd_epi32(_mm256_setzero_si256(), wq, aq);
                acc[j] = _mm256_fmadd_ps(_mm256_broadcastss_ps(prod), _mm256_cvtepi32_ps(p), acc[j]);
                accm[j] = _mm_add_ps(accm[j], prod);
            }
        }
        for j in 0..R {
            out[j] = hsum(acc[j]) + _mm_cvtss_f32(_mm_shuffle_ps(accm[j], accm[j], 1));
        }
    }

    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")]
    pub unsafe fn q8_0_vnni<const R: usize>(w: &[BlockQ8_0], a: &[BlockQ8Act], nb: usize, out: &mut [f32; TILE]) {
        let mut acc = [_mm256_setzero_ps(); R];
        for b in 0..nb {
            let blk = w.get_unchecked(b);
            let d = f16(blk.d);
            let wq = _mm256_loadu_si256(blk.qs.as_ptr() as *const __m256i);
            let wabs = _mm256_sign_epi8(wq, wq);
            for j in 0..R {
                let ab = a.get_unchecked(j * nb + b);
                let aq = _mm256_loadu_si256(ab.qs.as_ptr() as *const __m256i);
                let sa = _mm256_sign_epi8(aq, wq);
                let p = _mm256_dpbusd_epi32(_mm256_setzero_si256(), wabs, sa);
                acc[j] = _mm256_fmadd_ps(_mm256_set1_ps(d * ab.d), _mm256_cvtepi32_ps(p), acc[j]);
            }
        }
        for j in 0..R {
            out[j] = hsum(acc[j]);
        }
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

    fn random_q4_1(rows: usize, cols: usize, seed: &mut u64) -> QMatrix {
        let blocks = (0..rows * cols / QK)
            .map(|_| {
                let mut qs = [0u8; 16];
                for q in qs.iter_mut() {
                    *q = ((lcg(seed) + 1.0) * 127.9) as u8;
                }
                BlockQ4_1 {
                    d: f16::from_f32(lcg(seed).abs() * 0.1).to_bits(),
                    m: f16::from_f32(lcg(seed) * 0.5).to_bits(),
                    qs,
                }
            })
            .collect();
        QMatrix { rows, cols, data: QData::Q4_1(blocks) }
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
        let mut act = Vec::new();
        quantize_activations(&x, w.cols, &mut act);
        let mut out = vec![0f32; m * w.rows];
        matmul(w, &act, m, &mut out);
        let want = reference(w, &x, m);
        let scale = want.iter().fold(0f32, |a, v| a.max(v.abs()));
        for (g, e) in out.iter().zip(&want) {
            assert!((g - e).abs() <= 0.02 * scale + 1e-3, "got {g}, want {e} (scale {scale})");
        }
        // Every kernel family computes the same integer dot products, so the
        // scalar path must agree with the SIMD one almost exactly.
        let mut scalar = vec![0f32; m * w.rows];
        let nb = w.cols / QK;
        for i in 0..m {
            for r in 0..w.rows {
                let mut res = [0f32; TILE];
                match &w.data {
                    QData::Q4_1(b) => scalar_q4_1(&b[r * nb..(r + 1) * nb], &act[i * nb..], nb, 1, &mut res),
                    QData::Q8_0(b) => scalar_q8_0(&b[r * nb..(r + 1) * nb], &act[i * nb..], nb, 1, &mut res),
                }
                scalar[i * w.rows + r] = res[0];
            }
        }
        for (g, e) in out.iter().zip(&scalar) {
            assert!((g - e).abs() <= 1e-4 * scale.max(1.0), "simd {g} vs scalar {e}");
        }
    }

    #[test]
    fn q4_1_matmul_matches_reference() {
        let mut seed = 7;
        let w = random_q4_1(67, 96, &mut seed);
        for m in [1, 2, 3, 4, 5, 9, 70] {
            check(&w, m, &mut seed);
        }
    }

    #[test]
    fn q8_0_matmul_matches_reference() {
        let mut seed = 11;
        let vals: Vec<f32> = (0..45 * 128).map(|_| lcg(&mut seed)).collect();
        let w = QMatrix::quantize_q8_0(&vals, 45, 128);
        for m in [1, 4, 6, 67] {
            check(&w, m, &mut seed);
        }
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
