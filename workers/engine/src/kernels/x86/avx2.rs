//! 256-bit kernels: attention scores on AVX2, the plain-layout matmuls,
//! each instantiated twice from one macro, with the AVX2 integer dot
//! (`maddubs` + `madd`) and with AVX-512 VNNI's `vpdpbusd` on ymm
//! registers, and AVX2's grouped-layout Q4_1 / Q5_0 matmuls and activation
//! quantization.

use super::super::matrix::{BlockQ4K, BlockQ5K, BlockQ6K};
use super::super::{f16_to_f32, Tile, TILE};
use std::arch::x86_64::*;

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

// Q5_0 and the k-quants: per weight row, 8 consecutive 32-value blocks
// (a k-quant super-block, or a group of Q5_0 blocks) give 8 integer block
// dots that `reduce8` gathers into one vector, lane l for block l; the
// float work (scale by d_w * d_a, and the k-quants' min term) is then one
// multiply and one FMA per 8 blocks and activation row. `scalar.rs` holds
// the same arithmetic lane by lane, so results are bit-identical to it.

/// Eight vectors of partial dots -> one vector of their eight totals.
#[inline(always)]
unsafe fn reduce8(v: &[__m256i; 8]) -> __m256i {
    let a = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
    let b = _mm256_hadd_epi32(_mm256_hadd_epi32(v[4], v[5]), _mm256_hadd_epi32(v[6], v[7]));
    _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20), _mm256_permute2x128_si256(a, b, 0x31))
}

/// Byte k = 0xff where bit k of x is set (ggml's `bytes_from_bits_32`).
#[inline(always)]
unsafe fn bits32(x: u32) -> __m256i {
    let shuf = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
    let bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(x as i32), shuf);
    let bytes = _mm256_or_si256(bytes, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
    _mm256_cmpeq_epi8(bytes, _mm256_set1_epi64x(-1))
}

/// Eight u8 scales as f32 lanes.
#[inline(always)]
unsafe fn u8x8_ps(p: &[u8; 8]) -> __m256 {
    _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(p.as_ptr() as *const __m128i)))
}

#[inline(always)]
unsafe fn load32(x: &[i8; 32]) -> __m256i {
    _mm256_loadu_si256(x.as_ptr() as *const __m256i)
}

macro_rules! q5_0_kernel {
    ($name:ident, $features:literal, $dot:ident) => {
        #[target_feature(enable = $features)]
        pub unsafe fn $name<const R: usize>(wq: &[[u8; 16]], wqh: &[u32], wd: &[u16], a: &Tile, out: &mut [f32; TILE]) {
            let nb = a.nb;
            let fifth = _mm256_set1_epi8(0x10);
            let mut acc = [_mm256_setzero_ps(); R];
            let mut g = 0;
            while g < nb {
                let cnt = (nb - g).min(8);
                let mut w = [_mm256_setzero_si256(); 8];
                let mut dpad = [0u16; 8];
                for k in 0..cnt {
                    w[k] = _mm256_or_si256(unpack_q4(wq.get_unchecked(g + k)), _mm256_and_si256(bits32(*wqh.get_unchecked(g + k)), fifth));
                    dpad[k] = *wd.get_unchecked(g + k);
                }
                let sw = f16x8(dpad.as_ptr());
                for j in 0..R {
                    let o = j * nb + g;
                    let mut dots = [_mm256_setzero_si256(); 8];
                    let (ad8, is8);
                    if cnt == 8 {
                        for k in 0..8 {
                            dots[k] = $dot(w[k], load32(a.aq.get_unchecked(o + k)));
                        }
                        ad8 = _mm256_loadu_ps(a.ad.as_ptr().add(o));
                        is8 = _mm256_loadu_si256(a.isum.as_ptr().add(o) as *const __m256i);
                    } else {
                        // The last, partial group: missing lanes are zeros.
                        let (mut adp, mut isp) = ([0f32; 8], [0i32; 8]);
                        for k in 0..cnt {
                            dots[k] = $dot(w[k], load32(a.aq.get_unchecked(o + k)));
                            adp[k] = *a.ad.get_unchecked(o + k);
                            isp[k] = *a.isum.get_unchecked(o + k);
                        }
                        ad8 = _mm256_loadu_ps(adp.as_ptr());
                        is8 = _mm256_loadu_si256(isp.as_ptr() as *const __m256i);
                    }
                    // q - 16 as dot(q, x) - 16 * sum(x).
                    let idot = _mm256_sub_epi32(reduce8(&dots), _mm256_slli_epi32(is8, 4));
                    acc[j] = _mm256_fmadd_ps(_mm256_mul_ps(sw, ad8), _mm256_cvtepi32_ps(idot), acc[j]);
                }
                g += 8;
            }
            for j in 0..R {
                out[j] = hsum(acc[j]);
            }
        }
    };
}

/// Q4_K and Q5_K share everything but the unpacking of q (`$unpack`).
macro_rules! kmin_kernel {
    ($name:ident, $features:literal, $dot:ident, $block:ty, $unpack:ident) => {
        #[target_feature(enable = $features)]
        pub unsafe fn $name<const R: usize>(w: &[$block], a: &Tile, out: &mut [f32; TILE]) {
            let nb = a.nb;
            let mut acc = [_mm256_setzero_ps(); R];
            let mut macc = [_mm256_setzero_ps(); R];
            for (s, blk) in w.iter().enumerate() {
                let wv = $unpack(blk);
                let sw = _mm256_mul_ps(_mm256_set1_ps(f16_to_f32(blk.d)), u8x8_ps(&blk.sc));
                let mw = _mm256_mul_ps(_mm256_set1_ps(f16_to_f32(blk.dmin)), u8x8_ps(&blk.m));
                for j in 0..R {
                    let o = j * nb + 8 * s;
                    let mut dots = [_mm256_setzero_si256(); 8];
                    for k in 0..8 {
                        dots[k] = $dot(wv[k], load32(a.aq.get_unchecked(o + k)));
                    }
                    let ad8 = _mm256_loadu_ps(a.ad.as_ptr().add(o));
                    let is8 = _mm256_cvtepi32_ps(_mm256_loadu_si256(a.isum.as_ptr().add(o) as *const __m256i));
                    acc[j] = _mm256_fmadd_ps(_mm256_mul_ps(sw, ad8), _mm256_cvtepi32_ps(reduce8(&dots)), acc[j]);
                    macc[j] = _mm256_fmadd_ps(_mm256_mul_ps(mw, ad8), is8, macc[j]);
                }
            }
            for j in 0..R {
                out[j] = hsum(acc[j]) - hsum(macc[j]);
            }
        }
    };
}

#[inline(always)]
unsafe fn unpack_q4k(b: &BlockQ4K) -> [__m256i; 8] {
    let mask = _mm256_set1_epi8(0x0f);
    let mut w = [_mm256_setzero_si256(); 8];
    for i in 0..4 {
        let v = _mm256_loadu_si256(b.qs.as_ptr().add(32 * i) as *const __m256i);
        w[2 * i] = _mm256_and_si256(v, mask);
        w[2 * i + 1] = _mm256_and_si256(_mm256_srli_epi16(v, 4), mask);
    }
    w
}

#[inline(always)]
unsafe fn unpack_q5k(b: &BlockQ5K) -> [__m256i; 8] {
    let mask = _mm256_set1_epi8(0x0f);
    let one = _mm256_set1_epi8(1);
    let hb = _mm256_loadu_si256(b.qh.as_ptr() as *const __m256i);
    let mut w = [_mm256_setzero_si256(); 8];
    for i in 0..4 {
        let v = _mm256_loadu_si256(b.qs.as_ptr().add(32 * i) as *const __m256i);
        let hi = |s: i32| match s {
            0 => _mm256_and_si256(hb, one),
            1 => _mm256_and_si256(_mm256_srli_epi16(hb, 1), one),
            2 => _mm256_and_si256(_mm256_srli_epi16(hb, 2), one),
            3 => _mm256_and_si256(_mm256_srli_epi16(hb, 3), one),
            4 => _mm256_and_si256(_mm256_srli_epi16(hb, 4), one),
            5 => _mm256_and_si256(_mm256_srli_epi16(hb, 5), one),
            6 => _mm256_and_si256(_mm256_srli_epi16(hb, 6), one),
            _ => _mm256_and_si256(_mm256_srli_epi16(hb, 7), one),
        };
        w[2 * i] = _mm256_or_si256(_mm256_and_si256(v, mask), _mm256_slli_epi16(hi(2 * i as i32), 4));
        w[2 * i + 1] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v, 4), mask), _mm256_slli_epi16(hi(2 * i as i32 + 1), 4));
    }
    w
}

macro_rules! q6k_kernel {
    ($name:ident, $features:literal, $dot:ident) => {
        #[target_feature(enable = $features)]
        pub unsafe fn $name<const R: usize>(w: &[BlockQ6K], a: &Tile, out: &mut [f32; TILE]) {
            let nb = a.nb;
            let (m4, m2, off) = (_mm256_set1_epi8(0x0f), _mm256_set1_epi8(3), _mm256_set1_epi8(32));
            let mut acc = [_mm256_setzero_ps(); R];
            for (s, blk) in w.iter().enumerate() {
                // q - 32 for the 8 blocks, signed bytes.
                let mut wv = [_mm256_setzero_si256(); 8];
                for n in 0..2 {
                    let l0 = _mm256_loadu_si256(blk.ql.as_ptr().add(64 * n) as *const __m256i);
                    let l1 = _mm256_loadu_si256(blk.ql.as_ptr().add(64 * n + 32) as *const __m256i);
                    let h = _mm256_loadu_si256(blk.qh.as_ptr().add(32 * n) as *const __m256i);
                    let hi = |x: __m256i| _mm256_slli_epi16(_mm256_and_si256(x, m2), 4);
                    let q = [
                        _mm256_or_si256(_mm256_and_si256(l0, m4), hi(h)),
                        _mm256_or_si256(_mm256_and_si256(l1, m4), hi(_mm256_srli_epi16(h, 2))),
                        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), hi(_mm256_srli_epi16(h, 4))),
                        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4), hi(_mm256_srli_epi16(h, 6))),
                    ];
                    for t in 0..4 {
                        wv[4 * n + t] = _mm256_sub_epi8(q[t], off);
                    }
                }
                let mut wabs = [_mm256_setzero_si256(); 8];
                let mut scv = [_mm256_setzero_si256(); 8];
                for k in 0..8 {
                    wabs[k] = _mm256_sign_epi8(wv[k], wv[k]);
                    // Lanes 0..3 hold the block's first 16 values' dots.
                    scv[k] = _mm256_set_m128i(_mm_set1_epi32(blk.sc[2 * k + 1] as i32), _mm_set1_epi32(blk.sc[2 * k] as i32));
                }
                let d = _mm256_set1_ps(f16_to_f32(blk.d));
                for j in 0..R {
                    let o = j * nb + 8 * s;
                    let mut dots = [_mm256_setzero_si256(); 8];
                    for k in 0..8 {
                        let x = load32(a.aq.get_unchecked(o + k));
                        dots[k] = _mm256_mullo_epi32($dot(wabs[k], _mm256_sign_epi8(x, wv[k])), scv[k]);
                    }
                    let ad8 = _mm256_loadu_ps(a.ad.as_ptr().add(o));
                    acc[j] = _mm256_fmadd_ps(_mm256_mul_ps(d, ad8), _mm256_cvtepi32_ps(reduce8(&dots)), acc[j]);
                }
            }
            for j in 0..R {
                out[j] = hsum(acc[j]);
            }
        }
    };
}

q4_1_kernel!(q4_1_avx2, "avx2,fma,f16c", dot_avx2);
q4_1_kernel!(q4_1_vnni, "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni", dot_vnni);
q8_0_kernel!(q8_0_avx2, "avx2,fma,f16c", dot_avx2);
q8_0_kernel!(q8_0_vnni, "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni", dot_vnni);
q5_0_kernel!(q5_0_avx2, "avx2,fma,f16c", dot_avx2);
q5_0_kernel!(q5_0_vnni, "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni", dot_vnni);
kmin_kernel!(q4k_avx2, "avx2,fma,f16c", dot_avx2, BlockQ4K, unpack_q4k);
kmin_kernel!(q4k_vnni, "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni", dot_vnni, BlockQ4K, unpack_q4k);
kmin_kernel!(q5k_avx2, "avx2,fma,f16c", dot_avx2, BlockQ5K, unpack_q5k);
kmin_kernel!(q5k_vnni, "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni", dot_vnni, BlockQ5K, unpack_q5k);
q6k_kernel!(q6k_avx2, "avx2,fma,f16c", dot_avx2);
q6k_kernel!(q6k_vnni, "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni", dot_vnni);

/// The grouped Q4_1 layout (`QData::Q4_1x16`) on AVX2: one 16-row weight
/// group against R activation rows, as two 8-row halves (one 32-bit lane
/// per weight row). Each half's block is unpacked once for all R rows;
/// per activation row the 4-byte pieces of the block are broadcast and
/// eight `maddubs` give 8 rows x 4 values of pair sums each. Their i16 sum
/// cannot overflow (|q x| <= 15 * 127 per product, 16 products per lane:
/// 30480), so one `madd` turns them into the 8 rows' exact block dots.
/// The float work, per block and lane, is AVX-512's `q4_1_x16`'s and
/// `scalar_q4_1`'s: acc = fma(dot, d_w * d_a, acc), macc = fma(m_w, s_a,
/// macc), acc + macc at the end, so the result is bit-identical to the
/// scalar kernel (tested) and to the AVX-512 one. Row j's 16 outputs go to
/// out[j * n ..][..16].
///
/// # Safety
/// AVX2, FMA and F16C; `qs`, `wd`, `wm` point at the group's first block
/// (nb blocks), rows i0..i0 + R of `a` exist, out[j * n + 0..16] is writable.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn q4_1_x16_avx2<const R: usize>(
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
    let mask = _mm256_set1_epi8(0x0f);
    let ones = _mm256_set1_epi16(1);
    for h in 0..2 {
        let mut acc = [_mm256_setzero_ps(); R];
        let mut macc = [_mm256_setzero_ps(); R];
        for b in 0..nb {
            let p = (qs.add(b * 4) as *const u8).add(32 * h);
            let ld = |k: usize| _mm256_load_si256(p.add(64 * k) as *const __m256i);
            let (p0, p1, p2, p3) = (ld(0), ld(1), ld(2), ld(3));
            // w[k]: elements 4k..4k+3 (low nibbles); w[4 + k]: 16+4k.. (high).
            let w = [
                _mm256_and_si256(p0, mask),
                _mm256_and_si256(p1, mask),
                _mm256_and_si256(p2, mask),
                _mm256_and_si256(p3, mask),
                _mm256_and_si256(_mm256_srli_epi16(p0, 4), mask),
                _mm256_and_si256(_mm256_srli_epi16(p1, 4), mask),
                _mm256_and_si256(_mm256_srli_epi16(p2, 4), mask),
                _mm256_and_si256(_mm256_srli_epi16(p3, 4), mask),
            ];
            let dw = f16x8((wd.add(b) as *const u16).add(8 * h));
            let mw = f16x8((wm.add(b) as *const u16).add(8 * h));
            for j in 0..R {
                let o = j * nb + b;
                let x = aq.add(o) as *const i32;
                let m = |k: usize| _mm256_maddubs_epi16(w[k], _mm256_set1_epi32(std::ptr::read_unaligned(x.add(k))));
                let s16 = _mm256_add_epi16(
                    _mm256_add_epi16(_mm256_add_epi16(m(0), m(1)), _mm256_add_epi16(m(2), m(3))),
                    _mm256_add_epi16(_mm256_add_epi16(m(4), m(5)), _mm256_add_epi16(m(6), m(7))),
                );
                let dot = _mm256_cvtepi32_ps(_mm256_madd_epi16(s16, ones));
                acc[j] = _mm256_fmadd_ps(dot, _mm256_mul_ps(dw, _mm256_set1_ps(*ad.add(o))), acc[j]);
                macc[j] = _mm256_fmadd_ps(mw, _mm256_set1_ps(*asum.add(o)), macc[j]);
            }
        }
        for j in 0..R {
            _mm256_storeu_ps(out.add(j * n + 8 * h), _mm256_add_ps(acc[j], macc[j]));
        }
    }
}

/// The grouped Q5_0 layout (`QData::Q5_0x16`) on AVX2, shaped like
/// `q4_1_x16_avx2`: the fifth bits join each half's unpacked nibbles once
/// per block (byte k of a lane takes bit 4p + k of the row's qh for piece
/// p), and four `maddubs` of pair sums (|q x| <= 31 * 127, 8 products per
/// i16 lane: 31496) go through one `madd`, two per block. The float work
/// is `scalar_q5_0`'s: block b's term goes to accumulator b % 8 by one
/// FMA, and the eight accumulators are added in `hsum8`'s order, so each
/// lane returns the scalar kernel's bits (tested).
///
/// # Safety
/// As `q4_1_x16_avx2`, with `qh` the group's fifth bits.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn q5_0_x16_avx2<const R: usize>(
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
    let mask = _mm256_set1_epi8(0x0f);
    let ones = _mm256_set1_epi16(1);
    let fifth = _mm256_set1_epi8(0x10);
    // Byte c of each 32-bit lane copied into the lane's four bytes.
    let rep = |c: i32| {
        let v = |l: i32| (4 * l + c) * 0x0101_0101;
        _mm256_setr_epi32(v(0), v(1), v(2), v(3), v(0), v(1), v(2), v(3))
    };
    let reps = [rep(0), rep(1), rep(2), rep(3)];
    let bitsel = [_mm256_set1_epi32(0x0804_0201), _mm256_set1_epi32(0x8040_2010u32 as i32)];
    for h in 0..2 {
        let mut acc = [[_mm256_setzero_ps(); R]; 8];
        for b in 0..nb {
            let p = (qs.add(b * 4) as *const u8).add(32 * h);
            let ld = |k: usize| _mm256_load_si256(p.add(64 * k) as *const __m256i);
            let (p0, p1, p2, p3) = (ld(0), ld(1), ld(2), ld(3));
            let mut w = [
                _mm256_and_si256(p0, mask),
                _mm256_and_si256(p1, mask),
                _mm256_and_si256(p2, mask),
                _mm256_and_si256(p3, mask),
                _mm256_and_si256(_mm256_srli_epi16(p0, 4), mask),
                _mm256_and_si256(_mm256_srli_epi16(p1, 4), mask),
                _mm256_and_si256(_mm256_srli_epi16(p2, 4), mask),
                _mm256_and_si256(_mm256_srli_epi16(p3, 4), mask),
            ];
            // Piece p holds elements 4p..4p+3 (p < 4: low nibbles; p >= 4:
            // high nibbles, elements 16 + 4(p - 4).. = 4p..), whose fifth
            // bits are bits 4p..4p+3 of qh: nibble p % 2 of byte p / 2.
            let hv = _mm256_loadu_si256((qh.add(b) as *const u32).add(8 * h) as *const __m256i);
            for (pc, wp) in w.iter_mut().enumerate() {
                let bytes = _mm256_shuffle_epi8(hv, reps[pc / 2]);
                let sel = bitsel[pc % 2];
                let set = _mm256_cmpeq_epi8(_mm256_and_si256(bytes, sel), sel);
                *wp = _mm256_or_si256(*wp, _mm256_and_si256(set, fifth));
            }
            let dw = f16x8((wd.add(b) as *const u16).add(8 * h));
            let slot = &mut acc[b % 8];
            for j in 0..R {
                let o = j * nb + b;
                let x = aq.add(o) as *const i32;
                let m = |k: usize| _mm256_maddubs_epi16(w[k], _mm256_set1_epi32(std::ptr::read_unaligned(x.add(k))));
                let lo = _mm256_madd_epi16(_mm256_add_epi16(_mm256_add_epi16(m(0), m(1)), _mm256_add_epi16(m(2), m(3))), ones);
                let hi = _mm256_madd_epi16(_mm256_add_epi16(_mm256_add_epi16(m(4), m(5)), _mm256_add_epi16(m(6), m(7))), ones);
                // q - 16 as dot(q, x) - 16 * sum(x).
                let idot = _mm256_sub_epi32(_mm256_add_epi32(lo, hi), _mm256_set1_epi32(16 * *ai.add(o)));
                slot[j] = _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_set1_ps(*ad.add(o))), _mm256_cvtepi32_ps(idot), slot[j]);
            }
        }
        for j in 0..R {
            let s = |l: usize, m: usize| _mm256_add_ps(acc[l][j], acc[m][j]);
            let v = _mm256_add_ps(_mm256_add_ps(s(0, 4), s(2, 6)), _mm256_add_ps(s(1, 5), s(3, 7)));
            _mm256_storeu_ps(out.add(j * n + 8 * h), v);
        }
    }
}

/// `quantize_activations` for whole blocks on AVX2, the AVX-512 version's
/// arithmetic on four 8-lane vectors: the same max (exact in any order),
/// q = trunc(v + copysign(0.5 - 2^-25, v)) as LLVM lowers `f32::round`,
/// and an exact integer sum, so the bytes and scales equal the scalar's
/// (tested). q is within -127..=127, so the saturating packs do not clip.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn quantize_blocks(x: &[f32], qs: &mut [[i8; 32]], d: &mut [f32], s: &mut [f32], isum: &mut [i32]) {
    use half::f16;
    let half = _mm256_castps_si256(_mm256_set1_ps(f32::from_bits(0x3eff_ffff)));
    let sign = _mm256_set1_epi32(i32::MIN);
    let abs = _mm256_castsi256_ps(_mm256_set1_epi32(i32::MAX));
    let round = |v: __m256| {
        let h = _mm256_or_si256(_mm256_and_si256(_mm256_castps_si256(v), sign), half);
        _mm256_cvttps_epi32(_mm256_add_ps(v, _mm256_castsi256_ps(h)))
    };
    let perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (b, xb) in x.chunks_exact(32).enumerate() {
        let v = [0, 8, 16, 24].map(|o| _mm256_loadu_ps(xb.as_ptr().add(o)));
        let m = _mm256_max_ps(_mm256_max_ps(_mm256_and_ps(v[0], abs), _mm256_and_ps(v[1], abs)), _mm256_max_ps(_mm256_and_ps(v[2], abs), _mm256_and_ps(v[3], abs)));
        let m = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
        let amax = _mm_cvtss_f32(_mm_max_ss(m, _mm_shuffle_ps(m, m, 1)));
        let dv = amax / 127.0;
        let id = if dv != 0.0 { 1.0 / dv } else { 0.0 };
        let idv = _mm256_set1_ps(id);
        let r = v.map(|x| round(_mm256_mul_ps(x, idv)));
        let q = _mm256_packs_epi16(_mm256_packs_epi32(r[0], r[1]), _mm256_packs_epi32(r[2], r[3]));
        _mm256_storeu_si256(qs.get_unchecked_mut(b).as_mut_ptr() as *mut __m256i, _mm256_permutevar8x32_epi32(q, perm));
        let t = _mm256_add_epi32(_mm256_add_epi32(r[0], r[1]), _mm256_add_epi32(r[2], r[3]));
        let t = _mm_add_epi32(_mm256_castsi256_si128(t), _mm256_extracti128_si256(t, 1));
        let t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0b01_00_11_10));
        let sum = _mm_cvtsi128_si32(_mm_add_epi32(t, _mm_shuffle_epi32(t, 0b10_11_00_01)));
        *d.get_unchecked_mut(b) = f16::from_f32(dv).to_f32();
        *s.get_unchecked_mut(b) = f16::from_f32(dv * sum as f32).to_f32();
        *isum.get_unchecked_mut(b) = sum;
    }
}
