//! AVX-512 kernels: attention scores and values for several heads at
//! once, activation quantization, and the grouped-layout (`Q*x16`) matmuls
//! built on `vpdpbusd`.

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
    qs: *const crate::kernels::Lane64,
    wd: *const [u16; 16],
    wm: *const [u16; 16],
    a: &crate::kernels::QActs,
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
    qs: *const crate::kernels::Lane64,
    wd: *const [u16; 16],
    a: &crate::kernels::QActs,
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


/// The grouped Q5_0 layout (`QData::Q5_0x16`): `q4_1_x16`'s unpacking and
/// `vpdpbusd` dots, with the fifth bits added to each piece once per block
/// (byte k of lane l gets 0x10 where bit 4p + k of row l's qh is set, for
/// piece p) and q - 16 taken as dot(q, x) - 16 * sum(x), the sum being the
/// starting value of the integer dot.
///
/// The float work must be `scalar_q5_0`'s to return its bits: block b's
/// term goes to accumulator b % 8 by one FMA, and the eight accumulators
/// are added in `hsum8`'s order. Eight accumulators per activation row do
/// not fit in registers beside the weights at R = 8, so the blocks are
/// walked by accumulator instead (b = l, l + 8, ... for l in the order the
/// final sum pairs them, `LANE_ORDER`), and each finished accumulator is
/// folded into at most three partial sums at once (`fold_lane`). Every
/// block is still unpacked once.
///
/// # Safety
/// AVX-512 F/BW/VL/VNNI, FMA, F16C; `qs`, `qh`, `wd` point at the group's
/// first block (nb blocks), rows i0..i0 + R of `a` exist, and
/// out[j * n + 0..16] is writable for j < R.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub unsafe fn q5_0_x16<const R: usize>(
    qs: *const crate::kernels::Lane64,
    qh: *const [u32; 16],
    wd: *const [u16; 16],
    a: &crate::kernels::QActs,
    i0: usize,
    out: *mut f32,
    n: usize,
) {
    let nb = a.nb;
    let aq = a.qs.as_ptr().add(i0 * nb);
    let ad = a.d.as_ptr().add(i0 * nb);
    let ai = a.isum.as_ptr().add(i0 * nb);
    let mask = _mm512_set1_epi8(0x0f);
    let fifth = _mm512_set1_epi8(0x10);
    // Byte c of each 32-bit lane copied into the lane's four bytes.
    let rep = |c: i32| {
        let v = |l: i32| (4 * l + c) * 0x0101_0101;
        _mm512_broadcast_i32x4(_mm_setr_epi32(v(0), v(1), v(2), v(3)))
    };
    let reps = [rep(0), rep(1), rep(2), rep(3)];
    let bitsel = [_mm512_set1_epi32(0x0804_0201), _mm512_set1_epi32(0x8040_2010u32 as i32)];
    let zero = [_mm512_setzero_ps(); R];
    let mut t = [zero; 3];
    for (step, l) in LANE_ORDER.into_iter().enumerate() {
        let mut acc = zero;
        let mut b = l;
        while b < nb {
            let p = qs.add(b * 4) as *const __m512i;
            let (p0, p1, p2, p3) = (_mm512_load_si512(p), _mm512_load_si512(p.add(1)), _mm512_load_si512(p.add(2)), _mm512_load_si512(p.add(3)));
            let mut w = [
                _mm512_and_si512(p0, mask),
                _mm512_and_si512(p1, mask),
                _mm512_and_si512(p2, mask),
                _mm512_and_si512(p3, mask),
                _mm512_and_si512(_mm512_srli_epi16(p0, 4), mask),
                _mm512_and_si512(_mm512_srli_epi16(p1, 4), mask),
                _mm512_and_si512(_mm512_srli_epi16(p2, 4), mask),
                _mm512_and_si512(_mm512_srli_epi16(p3, 4), mask),
            ];
            // Piece p holds elements 4p..4p+3, whose fifth bits are bits
            // 4p..4p+3 of qh: nibble p % 2 of byte p / 2. The nibbles are
            // below 0x10, so adding 0x10 sets bit 4.
            let hv = _mm512_loadu_si512(qh.add(b) as *const _);
            for (pc, wp) in w.iter_mut().enumerate() {
                let bytes = _mm512_shuffle_epi8(hv, reps[pc / 2]);
                let set = _mm512_test_epi8_mask(bytes, bitsel[pc % 2]);
                *wp = _mm512_mask_add_epi8(*wp, set, *wp, fifth);
            }
            let sw = _mm512_cvtph_ps(_mm256_loadu_si256(wd.add(b) as *const __m256i));
            for j in 0..R {
                let o = j * nb + b;
                let x = aq.add(o);
                let mut s = _mm512_set1_epi32(-16 * *ai.add(o));
                for (k, wk) in w.iter().enumerate() {
                    s = _mm512_dpbusd_epi32(s, *wk, bcast4(x, k));
                }
                let scale = _mm512_mul_ps(sw, _mm512_set1_ps(*ad.add(o)));
                acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), scale, acc[j]);
            }
            b += 8;
        }
        fold_lane(step, &acc, &mut t);
    }
    for j in 0..R {
        _mm512_storeu_ps(out.add(j * n), t[0][j]);
    }
}

/// Folds the accumulator of lane `l` (visited in the order 0 4 2 6 1 5 3 7,
/// `step` counting them) into partial sums so that t[0] ends as `hsum8`'s
/// ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7)); t[1], t[2] hold the
/// pairs being formed. `q5_0_x16`'s scheme, shared by the k-quant kernels.
#[inline(always)]
unsafe fn fold_lane<const R: usize>(step: usize, acc: &[__m512; R], t: &mut [[__m512; R]; 3]) {
    for j in 0..R {
        match step {
            0 => t[0][j] = acc[j],
            1 => t[0][j] = _mm512_add_ps(t[0][j], acc[j]),
            2 | 4 => t[1][j] = acc[j],
            3 => t[0][j] = _mm512_add_ps(t[0][j], _mm512_add_ps(t[1][j], acc[j])),
            5 => t[1][j] = _mm512_add_ps(t[1][j], acc[j]),
            6 => t[2][j] = acc[j],
            _ => t[0][j] = _mm512_add_ps(t[0][j], _mm512_add_ps(t[1][j], _mm512_add_ps(t[2][j], acc[j]))),
        }
    }
}

/// Lanes in the order `fold_lane` pairs them.
const LANE_ORDER: [usize; 8] = [0, 4, 2, 6, 1, 5, 3, 7];

/// The grouped Q4_K layout (`QData::Q4Kx16`): `q4_1_x16`'s dots per
/// 32-value sub-block, and `scalar_q4k`'s float work, which keeps sub-block
/// l of every super-block in accumulator l (scale d * sc, and min dmin * m
/// times the activation sum in a second one); walked by accumulator as in
/// `q5_0_x16` so the result has the scalar kernel's bits.
///
/// # Safety
/// As `q5_0_x16`, with the group's planes at the pointers (ns = nb / 8
/// super-blocks).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[allow(clippy::too_many_arguments)]
pub unsafe fn q4k_x16<const R: usize>(
    qs: *const crate::kernels::Lane64,
    sc: *const [u8; 16],
    mn: *const [u8; 16],
    d: *const [u16; 16],
    dmin: *const [u16; 16],
    a: &crate::kernels::QActs,
    i0: usize,
    out: *mut f32,
    n: usize,
) {
    let nb = a.nb;
    let ns = nb / 8;
    let aq = a.qs.as_ptr().add(i0 * nb);
    let ad = a.d.as_ptr().add(i0 * nb);
    let ai = a.isum.as_ptr().add(i0 * nb);
    let mask = _mm512_set1_epi8(0x0f);
    let u8s = |p: *const [u8; 16]| _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(p as *const __m128i)));
    let zero = [_mm512_setzero_ps(); R];
    let (mut t, mut tm) = ([zero; 3], [zero; 3]);
    for (step, l) in LANE_ORDER.into_iter().enumerate() {
        let (mut acc, mut macc) = (zero, zero);
        for s in 0..ns {
            let u = s * 8 + l;
            let p = qs.add(u * 4) as *const __m512i;
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
            let sw = _mm512_mul_ps(_mm512_cvtph_ps(_mm256_loadu_si256(d.add(s) as *const __m256i)), u8s(sc.add(u)));
            let mw = _mm512_mul_ps(_mm512_cvtph_ps(_mm256_loadu_si256(dmin.add(s) as *const __m256i)), u8s(mn.add(u)));
            for j in 0..R {
                let o = j * nb + 8 * s + l;
                let x = aq.add(o);
                let mut dot = _mm512_setzero_si512();
                for (k, wk) in w.iter().enumerate() {
                    dot = _mm512_dpbusd_epi32(dot, *wk, bcast4(x, k));
                }
                let xd = _mm512_set1_ps(*ad.add(o));
                acc[j] = _mm512_fmadd_ps(_mm512_mul_ps(sw, xd), _mm512_cvtepi32_ps(dot), acc[j]);
                macc[j] = _mm512_fmadd_ps(_mm512_mul_ps(mw, xd), _mm512_set1_ps(*ai.add(o) as f32), macc[j]);
            }
        }
        fold_lane(step, &acc, &mut t);
        fold_lane(step, &macc, &mut tm);
    }
    for j in 0..R {
        _mm512_storeu_ps(out.add(j * n), _mm512_sub_ps(t[0][j], tm[0][j]));
    }
}

/// The grouped Q6_K layout (`QData::Q6Kx16`): per 32-value sub-block two
/// 16-value half dots of q (0..64) with `vpdpbusd`, each started at -32
/// times the activations' half sum (`hsum[o]`, so it comes out as the dot
/// of q - 32) and multiplied by its half's scale: the exact integer dot
/// `scalar_q6k` takes, with its float work (accumulator l per sub-block l,
/// walked as in `q5_0_x16`), so the bits are the scalar kernel's.
///
/// # Safety
/// As `q4k_x16`; `hsum` holds the half sums of rows i0.. (2 per block, in
/// block order, nb blocks per row).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[allow(clippy::too_many_arguments)]
pub unsafe fn q6k_x16<const R: usize>(
    qs: *const crate::kernels::Lane64,
    sc: *const [i8; 16],
    d: *const [u16; 16],
    hsum: *const [i32; 2],
    a: &crate::kernels::QActs,
    i0: usize,
    out: *mut f32,
    n: usize,
) {
    let nb = a.nb;
    let ns = nb / 8;
    let aq = a.qs.as_ptr().add(i0 * nb);
    let ad = a.d.as_ptr().add(i0 * nb);
    let hs = hsum.add(i0 * nb);
    let i8s = |p: *const [i8; 16]| _mm512_cvtepi8_epi32(_mm_loadu_si128(p as *const __m128i));
    let zero = [_mm512_setzero_ps(); R];
    let mut t = [zero; 3];
    for (step, l) in LANE_ORDER.into_iter().enumerate() {
        let mut acc = zero;
        for s in 0..ns {
            let u = s * 8 + l;
            let p = qs.add(u * 8) as *const __m512i;
            let mut w = [_mm512_setzero_si512(); 8];
            for (k, wk) in w.iter_mut().enumerate() {
                *wk = _mm512_load_si512(p.add(k));
            }
            let (s0, s1) = (i8s(sc.add(2 * u)), i8s(sc.add(2 * u + 1)));
            let dw = _mm512_cvtph_ps(_mm256_loadu_si256(d.add(s) as *const __m256i));
            for j in 0..R {
                let o = j * nb + 8 * s + l;
                let x = aq.add(o);
                let h = *hs.add(o);
                let (mut lo, mut hi) = (_mm512_set1_epi32(-32 * h[0]), _mm512_set1_epi32(-32 * h[1]));
                for k in 0..4 {
                    lo = _mm512_dpbusd_epi32(lo, w[k], bcast4(x, k));
                    hi = _mm512_dpbusd_epi32(hi, w[k + 4], bcast4(x, k + 4));
                }
                let dot = _mm512_add_epi32(_mm512_mullo_epi32(lo, s0), _mm512_mullo_epi32(hi, s1));
                acc[j] = _mm512_fmadd_ps(_mm512_mul_ps(dw, _mm512_set1_ps(*ad.add(o))), _mm512_cvtepi32_ps(dot), acc[j]);
            }
        }
        fold_lane(step, &acc, &mut t);
    }
    for j in 0..R {
        _mm512_storeu_ps(out.add(j * n), t[0][j]);
    }
}
