//! 256-bit kernels: attention scores on AVX2 and the plain-layout Q4_1 /
//! Q8_0 matmuls, each instantiated twice from one macro, with the AVX2
//! integer dot (`maddubs` + `madd`) and with AVX-512 VNNI's `vpdpbusd` on
//! ymm registers.

use super::super::{Tile, TILE};
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

q4_1_kernel!(q4_1_avx2, "avx2,fma,f16c", dot_avx2);
q4_1_kernel!(q4_1_vnni, "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni", dot_vnni);
q8_0_kernel!(q8_0_avx2, "avx2,fma,f16c", dot_avx2);
q8_0_kernel!(q8_0_vnni, "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni", dot_vnni);
