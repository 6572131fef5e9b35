//! Portable kernels: the reference every SIMD kernel is held to, and what
//! runs where no SIMD family is available (`Isa::Scalar`).

use half::f16;

use super::matrix::{q4k_value, q5_0_value, q5k_value, q6k_value, BlockQ4K, BlockQ5K, BlockQ6K};
use super::{f16_to_f32, QActs, Tile, QK, TILE};

pub(super) fn quantize_scalar(x: &[f32], out: &mut QActs) {
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

/// Q4_1 in the grouped kernels' order (AVX-512 VNNI's `q4_1_x16` and
/// AVX2's `q4_1_x16_avx2` return these bits): per block, the exact integer
/// dot times d_w * d_a goes into one sum and m_w * s_a into another, each
/// by a fused multiply-add in block order; the two are added at the end.
pub(super) fn scalar_q4_1(wq: &[[u8; 16]], wd: &[u16], wm: &[u16], a: &Tile, t: usize, out: &mut [f32; TILE]) {
    let nb = a.nb;
    for j in 0..t {
        let (mut acc, mut macc) = (0f32, 0f32);
        for b in 0..nb {
            let (q, x) = (&wq[b], &a.aq[j * nb + b]);
            let mut isum = 0i32;
            for k in 0..16 {
                isum += (q[k] & 0x0f) as i32 * x[k] as i32 + (q[k] >> 4) as i32 * x[k + 16] as i32;
            }
            acc = (isum as f32).mul_add(f16_to_f32(wd[b]) * a.ad[j * nb + b], acc);
            macc = f16_to_f32(wm[b]).mul_add(a.asum[j * nb + b], macc);
        }
        out[j] = acc + macc;
    }
}

pub(super) fn scalar_q8_0(wq: &[[i8; 32]], wd: &[u16], a: &Tile, t: usize, out: &mut [f32; TILE]) {
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

pub(super) unsafe fn scores16_portable(q: &[f32], kt: *const f16, stride: usize, p0: usize, scale: f32, out: &mut [f32; 16]) {
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

/// `super::weighted_values64` in plain loops.
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn weighted_values64_portable(heads: usize, w: *const f32, w_stride: usize, n: usize, vc: *const f16, kvd: usize, voff: usize, out: *mut f32, hd: usize) {
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

// The reference for the Q5_0 and k-quant kernels. Their SIMD versions
// compute, per weight row and activation row, the exact integer dot of each
// 32-value block, then accumulate floats in 8 lanes (lane l takes blocks
// 8g + l) and add the lanes up in one fixed order; the code below does the
// same operations in the same order one lane at a time, so every kernel
// family returns the same bits (tested).

/// The horizontal sum the SIMD kernels use: ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)).
#[inline]
pub(super) fn hsum8(v: &[f32; 8]) -> f32 {
    let s = [v[0] + v[4], v[1] + v[5], v[2] + v[6], v[3] + v[7]];
    (s[0] + s[2]) + (s[1] + s[3])
}

#[inline]
fn idot32(w: impl Fn(usize) -> i32, x: &[i8; 32]) -> i32 {
    (0..32).map(|e| w(e) * x[e] as i32).sum()
}

pub(super) fn scalar_q5_0(wq: &[[u8; 16]], wqh: &[u32], wd: &[u16], a: &Tile, t: usize, out: &mut [f32; TILE]) {
    let nb = a.nb;
    for j in 0..t {
        let mut acc = [0f32; 8];
        for g in (0..nb).step_by(8) {
            for l in 0..8 {
                let b = g + l;
                let (idot, sw, ad) = if b < nb {
                    let o = j * nb + b;
                    let dot = idot32(|e| q5_0_value(&wq[b], wqh[b], e) as i32, &a.aq[o]);
                    (dot - 16 * a.isum[o], f16_to_f32(wd[b]), a.ad[o])
                } else {
                    (0, 0.0, 0.0)
                };
                acc[l] = (sw * ad).mul_add(idot as f32, acc[l]);
            }
        }
        out[j] = hsum8(&acc);
    }
}

/// Q4_K and Q5_K: `value(block, e)` gives q of element e.
fn scalar_kmin<B>(w: &[B], hdr: impl Fn(&B) -> (u16, u16, [u8; 8], [u8; 8]), value: impl Fn(&B, usize) -> u8, a: &Tile, t: usize, out: &mut [f32; TILE]) {
    let nb = a.nb;
    for j in 0..t {
        let (mut acc, mut macc) = ([0f32; 8], [0f32; 8]);
        for (s, blk) in w.iter().enumerate() {
            let (d, dmin, sc, m) = hdr(blk);
            let (d, dmin) = (f16_to_f32(d), f16_to_f32(dmin));
            for l in 0..8 {
                let o = j * nb + 8 * s + l;
                let idot = idot32(|e| value(blk, 32 * l + e) as i32, &a.aq[o]);
                let (sw, mw) = (d * sc[l] as f32, dmin * m[l] as f32);
                acc[l] = (sw * a.ad[o]).mul_add(idot as f32, acc[l]);
                macc[l] = (mw * a.ad[o]).mul_add(a.isum[o] as f32, macc[l]);
            }
        }
        out[j] = hsum8(&acc) - hsum8(&macc);
    }
}

pub(super) fn scalar_q4k(w: &[BlockQ4K], a: &Tile, t: usize, out: &mut [f32; TILE]) {
    scalar_kmin(w, |b| (b.d, b.dmin, b.sc, b.m), q4k_value, a, t, out)
}

pub(super) fn scalar_q5k(w: &[BlockQ5K], a: &Tile, t: usize, out: &mut [f32; TILE]) {
    scalar_kmin(w, |b| (b.d, b.dmin, b.sc, b.m), q5k_value, a, t, out)
}

pub(super) fn scalar_q6k(w: &[BlockQ6K], a: &Tile, t: usize, out: &mut [f32; TILE]) {
    let nb = a.nb;
    for j in 0..t {
        let mut acc = [0f32; 8];
        for (s, blk) in w.iter().enumerate() {
            let d = f16_to_f32(blk.d);
            for l in 0..8 {
                let o = j * nb + 8 * s + l;
                let idot: i32 = (0..32)
                    .map(|e| {
                        let (q, sc) = q6k_value(blk, 32 * l + e);
                        sc as i32 * q as i32 * a.aq[o][e] as i32
                    })
                    .sum();
                acc[l] = (d * a.ad[o]).mul_add(idot as f32, acc[l]);
            }
        }
        out[j] = hsum8(&acc);
    }
}
