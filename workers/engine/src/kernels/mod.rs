//! Quantized CPU matmul kernels. Weights stay in ggml's block layout (Q4_1 is
//! kept as is, so decode reads as few bytes as llama.cpp does; anything else is
//! requantized to Q8_0), activations are quantized per call to 8 bits like
//! llama.cpp's Q8_1, and each weight row is multiplied against several
//! activation rows while it sits in L1, so a batch of B sequences reads the
//! weights once per step instead of B times.

mod matrix;
mod scalar;
#[cfg(target_arch = "x86_64")]
mod x86;

pub use matrix::{BlockQ4K, BlockQ5K, BlockQ6K, Lane64, QActs, QData, QMatrix, QK_K};

use half::f16;

/// Values per quantization block (ggml's QK4_1 == QK8_0 == 32).
pub const QK: usize = 32;

/// Weight rows per packed group: one 32-bit lane of a 512-bit vector each.
pub const GROUP: usize = 16;

#[inline]
fn f16_to_f32(bits: u16) -> f32 {
    f16::from_bits(bits).to_f32()
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
    // matmul share on this path; the AVX-512 and AVX2 versions give
    // identical bytes and scales (same max, same product, same rounding).
    #[cfg(target_arch = "x86_64")]
    if isa() == Isa::Avx512Vnni {
        // SAFETY: the ISA check above covers the function's features.
        unsafe { x86::avx512::quantize_blocks(x, &mut out.qs, &mut out.d, &mut out.s, &mut out.isum) };
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if isa() == Isa::Avx2 {
        // SAFETY: as above; the AVX2 version gives the same bytes too.
        unsafe { x86::avx2::quantize_blocks(x, &mut out.qs, &mut out.d, &mut out.s, &mut out.isum) };
        return;
    }
    scalar::quantize_scalar(x, out);
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
    assert_eq!(out.len(), a.m * w.rows, "output size");
    matmul_strided(w, a, out, w.rows, 0);
}

/// Matrices of one width stacked row-wise and run as one projection (q, k
/// and v; gate and up). Parts of one type are merged into one matrix, one
/// thread fork; where a file mixes types (Q4_K_M gives some v and ffn
/// matrices another type than their neighbours) each part keeps its own
/// kernel and writes its own columns of the output.
#[derive(Clone, Debug)]
pub struct Stacked {
    pub rows: usize,
    pub cols: usize,
    pub parts: Vec<QMatrix>,
}

impl Stacked {
    /// Plain-layout parts in; each merged part is packed for this CPU.
    pub fn new(parts: Vec<QMatrix>) -> Stacked {
        let cols = parts[0].cols;
        let rows = parts.iter().map(|p| p.rows).sum();
        let parts = QMatrix::merge_rows(parts).into_iter().map(QMatrix::packed).collect();
        Stacked { rows, cols, parts }
    }

    pub fn bytes(&self) -> usize {
        self.parts.iter().map(|p| p.bytes()).sum()
    }

    pub fn dtype_name(&self) -> String {
        self.parts.iter().map(|p| p.dtype_name()).collect::<Vec<_>>().join("+")
    }
}

/// `matmul` over a `Stacked`: `out` is `[a.m, w.rows]`.
pub fn matmul_stacked(w: &Stacked, a: &QActs, out: &mut [f32]) {
    assert_eq!(out.len(), a.m * w.rows, "output size");
    let mut off = 0;
    for p in &w.parts {
        matmul_strided(p, a, out, w.rows, off);
        off += p.rows;
    }
}

/// out[i * ld + off + r] = dot(W[r], a[i]): `matmul` into columns
/// off..off + w.rows of a wider output with row stride `ld`.
pub fn matmul_strided(w: &QMatrix, a: &QActs, out: &mut [f32], ld: usize, off: usize) {
    let n = w.rows;
    let m = a.m;
    let nb = w.cols / QK;
    assert_eq!(a.nb, nb, "activation width");
    assert!(off + n <= ld, "columns {off}..{} outside a row of {ld}", off + n);
    if m == 0 || n == 0 {
        return;
    }
    assert!(out.len() >= (m - 1) * ld + off + n, "output size");
    #[cfg(target_arch = "x86_64")]
    if w.is_packed() {
        return matmul_packed(w, a, out, ld, off);
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
                        unsafe { *p.0.add((i + j) * ld + off + r) = *v };
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
    isum: &'a [i32],
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

/// `by_rows!` for kernels that take at most 4 rows.
macro_rules! by_rows4 {
    ($t:expr, $f:ident, $($arg:expr),*) => {
        match $t {
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
    let tile = Tile { nb, aq: &a.qs[rows.clone()], ad: &a.d[rows.clone()], asum: &a.s[rows.clone()], isum: &a.isum[rows] };
    let wr = r * nb..(r + 1) * nb;
    match &w.data {
        QData::Q4_1 { qs, d, m } => {
            let (wq, wd, wm) = (&qs[wr.clone()], &d[wr.clone()], &m[wr]);
            match isa {
                #[cfg(target_arch = "x86_64")]
                Isa::Avx512Vnni => unsafe {
                    use x86::avx2::q4_1_vnni as k;
                    by_rows!(t, k, wq, wd, wm, &tile, out)
                },
                #[cfg(target_arch = "x86_64")]
                Isa::Avx2 => unsafe {
                    use x86::avx2::q4_1_avx2 as k;
                    by_rows!(t, k, wq, wd, wm, &tile, out)
                },
                Isa::Scalar => scalar::scalar_q4_1(wq, wd, wm, &tile, t, out),
            }
        }
        QData::Q8_0 { qs, d } => {
            let (wq, wd) = (&qs[wr.clone()], &d[wr]);
            match isa {
                #[cfg(target_arch = "x86_64")]
                Isa::Avx512Vnni => unsafe {
                    use x86::avx2::q8_0_vnni as k;
                    by_rows!(t, k, wq, wd, &tile, out)
                },
                #[cfg(target_arch = "x86_64")]
                Isa::Avx2 => unsafe {
                    use x86::avx2::q8_0_avx2 as k;
                    by_rows!(t, k, wq, wd, &tile, out)
                },
                Isa::Scalar => scalar::scalar_q8_0(wq, wd, &tile, t, out),
            }
        }
        QData::Q5_0 { qs, qh, d } => {
            let (wq, wqh, wd) = (&qs[wr.clone()], &qh[wr.clone()], &d[wr]);
            match isa {
                #[cfg(target_arch = "x86_64")]
                Isa::Avx512Vnni => unsafe {
                    use x86::avx2::q5_0_vnni as k;
                    by_rows!(t, k, wq, wqh, wd, &tile, out)
                },
                #[cfg(target_arch = "x86_64")]
                Isa::Avx2 => unsafe {
                    use x86::avx2::q5_0_avx2 as k;
                    by_rows!(t, k, wq, wqh, wd, &tile, out)
                },
                Isa::Scalar => scalar::scalar_q5_0(wq, wqh, wd, &tile, t, out),
            }
        }
        QData::Q4K { blocks } => {
            let w = &blocks[r * nb / 8..(r + 1) * nb / 8];
            match isa {
                #[cfg(target_arch = "x86_64")]
                Isa::Avx512Vnni => unsafe {
                    use x86::avx2::q4k_vnni as k;
                    by_rows!(t, k, w, &tile, out)
                },
                #[cfg(target_arch = "x86_64")]
                Isa::Avx2 => unsafe {
                    use x86::avx2::q4k_avx2 as k;
                    by_rows!(t, k, w, &tile, out)
                },
                Isa::Scalar => scalar::scalar_q4k(w, &tile, t, out),
            }
        }
        QData::Q5K { blocks } => {
            let w = &blocks[r * nb / 8..(r + 1) * nb / 8];
            match isa {
                #[cfg(target_arch = "x86_64")]
                Isa::Avx512Vnni => unsafe {
                    use x86::avx2::q5k_vnni as k;
                    by_rows!(t, k, w, &tile, out)
                },
                #[cfg(target_arch = "x86_64")]
                Isa::Avx2 => unsafe {
                    use x86::avx2::q5k_avx2 as k;
                    by_rows!(t, k, w, &tile, out)
                },
                Isa::Scalar => scalar::scalar_q5k(w, &tile, t, out),
            }
        }
        QData::Q6K { blocks } => {
            let w = &blocks[r * nb / 8..(r + 1) * nb / 8];
            match isa {
                #[cfg(target_arch = "x86_64")]
                Isa::Avx512Vnni => unsafe {
                    use x86::avx2::q6k_vnni as k;
                    by_rows!(t, k, w, &tile, out)
                },
                #[cfg(target_arch = "x86_64")]
                Isa::Avx2 => unsafe {
                    use x86::avx2::q6k_avx2 as k;
                    by_rows!(t, k, w, &tile, out)
                },
                Isa::Scalar => scalar::scalar_q6k(w, &tile, t, out),
            }
        }
        QData::Q4_1x16 { .. } | QData::Q8_0x16 { .. } | QData::Q5_0x16 { .. } | QData::Q4Kx16 { .. } | QData::Q6Kx16 { .. } => {
            unreachable!("packed matrices go through matmul_packed")
        }
    }
}

/// `matmul` for the grouped layout (`QMatrix::packed`: Q4_1, Q5_0, Q8_0,
/// Q4_K and Q6_K on AVX-512 VNNI, Q4_1 and Q5_0 on AVX2).
/// Tasks own runs of 16-row groups; within a task each group's blocks stay
/// in L1 while up to 8 activation rows at a time pass over them, and every
/// pass writes 16 contiguous outputs per activation row.
#[cfg(target_arch = "x86_64")]
fn matmul_packed(w: &QMatrix, a: &QActs, out: &mut [f32], ld: usize, off: usize) {
    let (n, m, nb) = (w.rows, a.m, a.nb);
    let ng = n / GROUP;
    let threads = rayon::current_num_threads().max(1);
    let gchunk = ng.div_ceil(threads * 4).clamp(1, 64);
    let nchunks = ng.div_ceil(gchunk);
    let out_ptr = SendPtr(out.as_mut_ptr());
    let avx2 = isa() == Isa::Avx2;
    // Q6_K's kernel takes q unsigned and removes the offset of 32 with the
    // activations' sums over each 16-value half (the scale changes there).
    let hsum: Vec<[i32; 2]> = if matches!(w.data, QData::Q6Kx16 { .. }) {
        a.qs[..m * nb].iter().map(|q| [q[..16].iter().map(|&v| v as i32).sum(), q[16..].iter().map(|&v| v as i32).sum()]).collect()
    } else {
        Vec::new()
    };
    // AVX2 has 16 vector registers: 8 hold a half-group's unpacked block,
    // so 4 activation rows' sums fit beside them.
    let tile = if avx2 { 4 } else { TILE };
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
                    let t = (me - i).min(tile);
                    // SAFETY: the kernel writes out[(i..i+t) * ld + off +
                    // 16g .. +16], inside `out` (asserted sizes) and owned
                    // by this task alone (disjoint groups).
                    unsafe {
                        let o = p.0.add(i * ld + off + g * GROUP);
                        match &w.data {
                            QData::Q4_1x16 { qs, d, m: wm } => {
                                let (q, d, wm) = (qs[g * nb * 4..].as_ptr(), d[g * nb..].as_ptr(), wm[g * nb..].as_ptr());
                                if avx2 {
                                    use x86::avx2::q4_1_x16_avx2 as k;
                                    by_rows4!(t, k, q, d, wm, a, i, o, ld)
                                } else {
                                    use x86::avx512::q4_1_x16 as k;
                                    by_rows!(t, k, q, d, wm, a, i, o, ld)
                                }
                            }
                            QData::Q5_0x16 { qs, qh, d } => {
                                let (q, h, d) = (qs[g * nb * 4..].as_ptr(), qh[g * nb..].as_ptr(), d[g * nb..].as_ptr());
                                if avx2 {
                                    use x86::avx2::q5_0_x16_avx2 as k;
                                    by_rows4!(t, k, q, h, d, a, i, o, ld)
                                } else {
                                    use x86::avx512::q5_0_x16 as k;
                                    by_rows!(t, k, q, h, d, a, i, o, ld)
                                }
                            }
                            QData::Q4Kx16 { qs, sc, m: mn, d, dmin } => {
                                let ns = nb / 8;
                                let (q, sc, mn) = (qs[g * nb * 4..].as_ptr(), sc[g * nb..].as_ptr(), mn[g * nb..].as_ptr());
                                let (d, dmin) = (d[g * ns..].as_ptr(), dmin[g * ns..].as_ptr());
                                use x86::avx512::q4k_x16 as k;
                                by_rows!(t, k, q, sc, mn, d, dmin, a, i, o, ld)
                            }
                            QData::Q6Kx16 { qs, sc, d } => {
                                let (q, sc, d) = (qs[g * nb * 8..].as_ptr(), sc[g * nb * 2..].as_ptr(), d[g * nb / 8..].as_ptr());
                                use x86::avx512::q6k_x16 as k;
                                by_rows!(t, k, q, sc, d, hsum.as_ptr(), a, i, o, ld)
                            }
                            QData::Q8_0x16 { qs, d } => {
                                let (q, d) = (qs[g * nb * 8..].as_ptr(), d[g * nb..].as_ptr());
                                use x86::avx512::q8_0_x16 as k;
                                by_rows!(t, k, q, d, a, i, o, ld)
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
        Isa::Avx512Vnni => x86::avx512::scores16_heads_avx512::<1>(q, q.len(), kt, stride, p0, scale, out.as_mut_ptr(), 16),
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => x86::avx2::scores16_avx2(q, kt, stride, p0, scale, out),
        Isa::Scalar => scalar::scores16_portable(q, kt, stride, p0, scale, out),
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
            1 => x86::avx512::scores16_heads_avx512::<1>(qs, hd, kt, stride, p0, scale, out, out_stride),
            2 => x86::avx512::scores16_heads_avx512::<2>(qs, hd, kt, stride, p0, scale, out, out_stride),
            3 => x86::avx512::scores16_heads_avx512::<3>(qs, hd, kt, stride, p0, scale, out, out_stride),
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
            1 => x86::avx512::weighted_values64_avx512::<1>(w, w_stride, n, vc, kvd, voff, out, hd),
            2 => x86::avx512::weighted_values64_avx512::<2>(w, w_stride, n, vc, kvd, voff, out, hd),
            3 => x86::avx512::weighted_values64_avx512::<3>(w, w_stride, n, vc, kvd, voff, out, hd),
            _ => panic!("weighted_values64 takes 1 to 3 heads, got {heads}"),
        };
    }
    scalar::weighted_values64_portable(heads, w, w_stride, n, vc, kvd, voff, out, hd)
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

/// out = GELU(gate) * up, GELU by its tanh approximation (ggml's
/// `ggml_gelu`): 0.5 x (1 + tanh(u)) with u = sqrt(2/pi) (x + 0.044715 x^3),
/// computed as x / (1 + e^(-2u)), the same function without the loss of
/// 1 + tanh(u) near -1. libm's tanhf is a call per value that LLVM cannot
/// vectorize (14 % of a Gemma prefill); `exp_poly` below is plain
/// arithmetic, so this loop vectorizes to the target's full width, with
/// the same bits at any width (no FMA contraction in Rust).
pub fn gelu_tanh_mul(gate: &[f32], up: &[f32], out: &mut [f32]) {
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    for ((o, &x), &u) in out.iter_mut().zip(gate).zip(up) {
        let t = -2.0 * SQRT_2_OVER_PI * x * (1.0 + 0.044715 * x * x);
        *o = x / (1.0 + exp_poly(t)) * u;
    }
}

/// e^x for the activations, within 1 ulp of the exact value on
/// [-87, 88] (and clamped to it: the ends give 1.6e-38 and 1.7e38, so a
/// sigmoid built on it still goes to exactly 0 or 1 in f32). Cephes'
/// `expf`: x = n ln2 + r with |r| <= ln2 / 2 (ln2 in two parts so n ln2 is
/// exact), a degree-6 polynomial for e^r, and 2^n put into the exponent
/// bits. Branch-free, so loops over it vectorize.
#[inline(always)]
pub fn exp_poly(x: f32) -> f32 {
    // 1.5 * 2^23: adding it rounds to an integer (ties to even) and leaves
    // that integer in the low mantissa bits.
    const ROUND: f32 = 12_582_912.0;
    let x = x.clamp(-87.0, 88.0);
    let t = x * std::f32::consts::LOG2_E + ROUND;
    let n = t - ROUND;
    let r = x - n * 0.693_359_4 - n * -2.121_944_4e-4;
    let mut p = 1.987_569_1e-4_f32;
    p = p * r + 1.398_199_9e-3;
    p = p * r + 8.333_452e-3;
    p = p * r + 4.166_579_6e-2;
    p = p * r + 0.166_666_65;
    p = p * r + 0.5;
    let er = p * r * r + r + 1.0;
    // n + 127 into the exponent field: 2^n (n in -126..=127 after the clamp).
    let pow2 = f32::from_bits((t.to_bits().wrapping_sub(ROUND.to_bits()).wrapping_add(127)) << 23);
    er * pow2
}

// Declared last so the tests can call kernels through `by_rows!`.
#[cfg(test)]
mod tests;
