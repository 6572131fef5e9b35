//! Kernel tests: every SIMD family against the portable reference.

use super::*;
use super::scalar::{quantize_scalar, scores16_portable};

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
                unsafe { x86::avx2::scores16_avx2(&q, kt.as_ptr(), stride, p0, 0.125, &mut got) };
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
    // The AVX2 version too, whichever family this CPU dispatches to.
    #[cfg(target_arch = "x86_64")]
    if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") && is_x86_feature_detected!("f16c") {
        let mut c = a.clone();
        c.qs.fill([0; 32]);
        c.d.fill(-1.0);
        c.s.fill(-1.0);
        c.isum.fill(-1);
        unsafe { x86::avx2::quantize_blocks(&x, &mut c.qs, &mut c.d, &mut c.s, &mut c.isum) };
        assert_eq!((c.qs, c.d, c.s, c.isum), (b.qs, b.d, b.s, b.isum), "avx2 quantize");
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

/// Random ggml-layout bytes of `blocks` blocks of `size` bytes, with the
/// f16 scales at `scales` (byte offsets) set to small finite values.
fn random_blocks(blocks: usize, size: usize, scales: &[usize], seed: &mut u64) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(blocks * size);
    for _ in 0..blocks {
        let mut b: Vec<u8> = (0..size).map(|_| ((lcg(seed) + 1.0) * 127.9) as u8).collect();
        for &o in scales {
            b[o..o + 2].copy_from_slice(&f16::from_f32(lcg(seed) * 0.05).to_le_bytes());
        }
        bytes.extend(b);
    }
    bytes
}

/// ggml's own dequantization (candle's port of it) of the same bytes.
fn ggml_dequantize<B: candle_core::quantized::GgmlType + Clone>(bytes: &[u8], n: usize) -> Vec<f32> {
    let size = std::mem::size_of::<B>();
    assert_eq!(bytes.len() % size, 0);
    let mut blocks: Vec<B> = Vec::with_capacity(bytes.len() / size);
    // SAFETY: candle's block types are repr(C) plain data with ggml's byte
    // layout; the copy goes into properly aligned storage.
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), blocks.as_mut_ptr() as *mut u8, bytes.len());
        blocks.set_len(bytes.len() / size);
    }
    let mut out = vec![0f32; n];
    B::to_float(&blocks, &mut out);
    out
}

/// The Q5_0 / k-quant kernels of every ISA return the portable kernel's
/// bits, the portable kernel agrees with a float reference, and the
/// matrices dequantize exactly as ggml does.
fn check_exact(w: &QMatrix, ggml: &[f32], seed: &mut u64) {
    assert_eq!(w.dequantize(), ggml, "{} dequantization vs ggml", w.dtype_name());
    for m in [1, 2, 3, 5, 8, 9, 70] {
        let x: Vec<f32> = (0..m * w.cols).map(|_| lcg(seed)).collect();
        let mut act = QActs::default();
        quantize_activations(&x, w.cols, &mut act);
        let mut out = vec![0f32; m * w.rows];
        matmul(w, &act, &mut out);
        let want = reference(w, &x, m);
        let scale = want.iter().fold(0f32, |a, v| a.max(v.abs()));
        for (g, e) in out.iter().zip(&want) {
            assert!((g - e).abs() <= 0.02 * scale + 1e-3, "{}: got {g}, want {e} (scale {scale})", w.dtype_name());
        }
        let mut isas = vec![Isa::Scalar];
        #[cfg(target_arch = "x86_64")]
        {
            if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") && is_x86_feature_detected!("f16c") {
                isas.push(Isa::Avx2);
            }
            if isa() == Isa::Avx512Vnni {
                isas.push(Isa::Avx512Vnni);
            }
        }
        for i0 in (0..m).step_by(TILE) {
            let t = (m - i0).min(TILE);
            for r in 0..w.rows {
                let mut base = [0f32; TILE];
                dot_tile(Isa::Scalar, w, r, &act, i0, t, &mut base);
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                // A row's result does not depend on the rows beside it...
                for j in 0..t {
                    let mut one = [0f32; TILE];
                    dot_tile(Isa::Scalar, w, r, &act, i0 + j, 1, &mut one);
                    assert_eq!(one[0].to_bits(), base[j].to_bits(), "tile of {t} vs one row");
                }
                // ...nor on the kernel family.
                for &isa in &isas {
                    let mut got = [0f32; TILE];
                    dot_tile(isa, w, r, &act, i0, t, &mut got);
                    assert_eq!(bits(&got[..t]), bits(&base[..t]), "{} {isa:?} row {r}, rows {i0}..{}", w.dtype_name(), i0 + t);
                }
                for j in 0..t {
                    assert_eq!(out[(i0 + j) * w.rows + r].to_bits(), base[j].to_bits(), "matmul vs tile");
                }
            }
        }
    }
}

#[test]
fn q5_0_kernels_are_bit_identical() {
    let mut seed = 21;
    // 640 = 20 blocks: two whole groups of 8 and a partial one.
    for (rows, cols) in [(7, 640), (16, 256), (3, 96)] {
        let bytes = random_blocks(rows * cols / 32, 22, &[0], &mut seed);
        let w = QMatrix::from_ggml("q5_0", &bytes, rows, cols).unwrap();
        check_exact(&w, &ggml_dequantize::<candle_core::quantized::k_quants::BlockQ5_0>(&bytes, rows * cols), &mut seed);
    }
}

#[test]
fn q4_k_kernels_are_bit_identical() {
    let mut seed = 22;
    for (rows, cols) in [(7, 512), (16, 256), (5, 2048)] {
        let bytes = random_blocks(rows * cols / 256, 144, &[0, 2], &mut seed);
        let w = QMatrix::from_ggml("q4_k", &bytes, rows, cols).unwrap();
        check_exact(&w, &ggml_dequantize::<candle_core::quantized::k_quants::BlockQ4K>(&bytes, rows * cols), &mut seed);
    }
}

#[test]
fn q5_k_kernels_are_bit_identical() {
    let mut seed = 23;
    for (rows, cols) in [(7, 512), (16, 256)] {
        let bytes = random_blocks(rows * cols / 256, 176, &[0, 2], &mut seed);
        let w = QMatrix::from_ggml("q5_k", &bytes, rows, cols).unwrap();
        check_exact(&w, &ggml_dequantize::<candle_core::quantized::k_quants::BlockQ5K>(&bytes, rows * cols), &mut seed);
    }
}

#[test]
fn q6_k_kernels_are_bit_identical() {
    let mut seed = 24;
    for (rows, cols) in [(7, 512), (16, 256), (3, 1024)] {
        let bytes = random_blocks(rows * cols / 256, 210, &[208], &mut seed);
        let w = QMatrix::from_ggml("q6_k", &bytes, rows, cols).unwrap();
        check_exact(&w, &ggml_dequantize::<candle_core::quantized::k_quants::BlockQ6K>(&bytes, rows * cols), &mut seed);
    }
}

#[test]
fn stacked_mixed_types_fill_their_columns() {
    let mut seed = 25;
    let a = QMatrix::from_ggml("q5_0", &random_blocks(3 * 256 / 32, 22, &[0], &mut seed), 3, 256).unwrap();
    let b = QMatrix::from_ggml("q6_k", &random_blocks(2, 210, &[208], &mut seed), 2, 256).unwrap();
    let c = QMatrix::from_ggml("q5_0", &random_blocks(2 * 256 / 32, 22, &[0], &mut seed), 2, 256).unwrap();
    let st = Stacked::new(vec![a.clone(), b.clone(), c.clone()]);
    assert_eq!((st.rows, st.parts.len()), (7, 3));
    let x: Vec<f32> = (0..4 * 256).map(|_| lcg(&mut seed)).collect();
    let mut act = QActs::default();
    quantize_activations(&x, 256, &mut act);
    let mut out = vec![0f32; 4 * 7];
    matmul_stacked(&st, &act, &mut out);
    let mut off = 0;
    for p in [&a, &b, &c] {
        let mut o = vec![0f32; 4 * p.rows];
        matmul(p, &act, &mut o);
        for i in 0..4 {
            assert_eq!(&out[i * 7 + off..i * 7 + off + p.rows], &o[i * p.rows..(i + 1) * p.rows]);
        }
        off += p.rows;
    }
}

/// The AVX2 grouped Q4_1 kernel returns the scalar kernel's bits for
/// every row of every group, at each tile height it is called with.
#[cfg(target_arch = "x86_64")]
#[test]
fn q4_1_grouped_avx2_is_bit_identical() {
    if !(is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") && is_x86_feature_detected!("f16c")) {
        eprintln!("no AVX2: the grouped AVX2 kernel is not exercised");
        return;
    }
    let mut seed = 31;
    for cols in [96, 256, 576] {
        let w = random_q4_1(48, cols, &mut seed);
        let wp = w.clone().packed_unchecked();
        let QData::Q4_1x16 { qs, d, m: wm } = &wp.data else { panic!("not grouped") };
        let nb = cols / QK;
        for m in [1usize, 3, 4, 9] {
            let x: Vec<f32> = (0..m * cols).map(|_| lcg(&mut seed) * 2.0).collect();
            let mut act = QActs::default();
            quantize_activations(&x, cols, &mut act);
            for g in 0..w.rows / GROUP {
                let (q, dp, mp) = (qs[g * nb * 4..].as_ptr(), d[g * nb..].as_ptr(), wm[g * nb..].as_ptr());
                let mut i0 = 0;
                while i0 < m {
                    let t = (m - i0).min(4);
                    let mut got = vec![0f32; t * GROUP];
                    unsafe {
                        use x86::avx2::q4_1_x16_avx2 as k;
                        let o = got.as_mut_ptr();
                        match t {
                            4 => k::<4>(q, dp, mp, &act, i0, o, GROUP),
                            3 => k::<3>(q, dp, mp, &act, i0, o, GROUP),
                            2 => k::<2>(q, dp, mp, &act, i0, o, GROUP),
                            _ => k::<1>(q, dp, mp, &act, i0, o, GROUP),
                        }
                    }
                    for j in 0..t {
                        for l in 0..GROUP {
                            let mut want = [0f32; TILE];
                            dot_tile(Isa::Scalar, &w, g * GROUP + l, &act, i0 + j, 1, &mut want);
                            assert_eq!(got[j * GROUP + l].to_bits(), want[0].to_bits(), "cols {cols}, group {g}, row {}, act row {}", g * GROUP + l, i0 + j);
                        }
                    }
                    i0 += t;
                }
            }
        }
    }
}

/// The grouped Q5_0 layout dequantizes as the plain one, and its kernels
/// (AVX2's, and AVX-512's where the CPU has VNNI, each called directly at
/// every tile height it runs at, and whichever `matmul` picks) return the
/// scalar kernel's bits, including widths with a partial group of 8 blocks
/// and ones with fewer than 8 blocks.
#[cfg(target_arch = "x86_64")]
#[test]
fn q5_0_grouped_is_bit_identical() {
    if !(is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") && is_x86_feature_detected!("f16c")) {
        eprintln!("no AVX2: the grouped Q5_0 kernels are not exercised");
        return;
    }
    let vnni = isa() == Isa::Avx512Vnni;
    let mut seed = 33;
    for (rows, cols) in [(32, 640), (16, 256), (48, 96), (16, 2048)] {
        let w = QMatrix::from_ggml("q5_0", &random_blocks(rows * cols / 32, 22, &[0], &mut seed), rows, cols).unwrap();
        let wp = w.clone().packed_unchecked();
        assert_eq!(wp.dequantize(), w.dequantize(), "grouped Q5_0 values");
        let QData::Q5_0x16 { qs, qh, d } = &wp.data else { panic!("not grouped") };
        let nb = cols / QK;
        for m in [1usize, 2, 3, 4, 5, 8, 9, 17] {
            let x: Vec<f32> = (0..m * cols).map(|_| lcg(&mut seed)).collect();
            let mut act = QActs::default();
            quantize_activations(&x, cols, &mut act);
            let mut want = vec![0f32; m * rows];
            for i in 0..m {
                for r in 0..rows {
                    let mut one = [0f32; TILE];
                    dot_tile(Isa::Scalar, &w, r, &act, i, 1, &mut one);
                    want[i * rows + r] = one[0];
                }
            }
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            for avx512 in [false, true] {
                if avx512 && !vnni {
                    continue;
                }
                let tile = if avx512 { TILE } else { 4 };
                let mut got = vec![0f32; m * rows];
                for g in 0..rows / GROUP {
                    let (q, h, dp) = (qs[g * nb * 4..].as_ptr(), qh[g * nb..].as_ptr(), d[g * nb..].as_ptr());
                    let mut i = 0;
                    while i < m {
                        let t = (m - i).min(tile);
                        // SAFETY: AVX2 checked above, VNNI by `isa()`; the
                        // group's blocks and rows i..i + t exist, and the
                        // outputs land inside `got`.
                        unsafe {
                            let o = got.as_mut_ptr().add(i * rows + g * GROUP);
                            if avx512 {
                                use x86::avx512::q5_0_x16 as k;
                                by_rows!(t, k, q, h, dp, &act, i, o, rows)
                            } else {
                                use x86::avx2::q5_0_x16_avx2 as k;
                                by_rows4!(t, k, q, h, dp, &act, i, o, rows)
                            }
                        }
                        i += t;
                    }
                }
                assert_eq!(bits(&got), bits(&want), "{rows}x{cols}, m {m}, {}", if avx512 { "avx512" } else { "avx2" });
            }
            let wq = w.clone().packed();
            let mut out = vec![0f32; m * rows];
            matmul(&wq, &act, &mut out);
            assert_eq!(bits(&out), bits(&want), "{rows}x{cols}, m {m}, matmul on {:?} (grouped: {})", isa(), wq.is_packed());
        }
    }
}

/// Not a check: the CPU time of the SmolLM2 and Gemma 3 projections' matmuls, plain
/// layout against grouped, in alternating rounds (thread CPU time, so a
/// loaded box skews it less than wall time). Run single-threaded:
/// `RAYON_NUM_THREADS=1 cargo test --release --lib kernel_cpu_time -- --ignored --nocapture`.
#[cfg(target_os = "linux")]
#[test]
#[ignore]
fn kernel_cpu_time() {
    #[repr(C)]
    struct Timespec {
        sec: i64,
        nsec: i64,
    }
    extern "C" {
        fn clock_gettime(clock: i32, tp: *mut Timespec) -> i32;
    }
    let cpu = || {
        let mut t = Timespec { sec: 0, nsec: 0 };
        // SAFETY: 3 is CLOCK_THREAD_CPUTIME_ID; `t` is a valid timespec.
        unsafe { clock_gettime(3, &mut t) };
        t.sec as f64 + t.nsec as f64 * 1e-9
    };
    let mut seed = 41;
    // SmolLM2-135M's Q4_1 projections; Gemma 3 270M's Q5_0 ones (q and k, gate and up).
    // Gemma's o (Q4_K) and down (Q6_K) too, grouped on AVX-512 VNNI only.
    let sets: [(&str, &[(usize, usize)]); 4] = [
        ("q4_1", &[(960, 576), (576, 576), (3072, 576), (576, 1536)]),
        ("q5_0", &[(1280, 640), (4096, 640)]),
        ("q4_k", &[(640, 1024)]),
        ("q6_k", &[(640, 2048)]),
    ];
    for (dtype, shapes) in sets {
        let mats: Vec<(QMatrix, QMatrix)> = shapes
            .iter()
            .map(|&(r, c)| {
                let w = match dtype {
                    "q4_1" => random_q4_1(r, c, &mut seed),
                    "q5_0" => QMatrix::from_ggml("q5_0", &random_blocks(r * c / 32, 22, &[0], &mut seed), r, c).unwrap(),
                    "q4_k" => QMatrix::from_ggml("q4_k", &random_blocks(r * c / 256, 144, &[0, 2], &mut seed), r, c).unwrap(),
                    _ => QMatrix::from_ggml("q6_k", &random_blocks(r * c / 256, 210, &[208], &mut seed), r, c).unwrap(),
                };
                let p = w.clone().packed();
                (w, p)
            })
            .collect();
        for m in [1usize, 8, 128] {
            let acts: Vec<QActs> = shapes
                .iter()
                .map(|&(_, c)| {
                    let x: Vec<f32> = (0..m * c).map(|_| lcg(&mut seed)).collect();
                    let mut a = QActs::default();
                    quantize_activations(&x, c, &mut a);
                    a
                })
                .collect();
            let macs: f64 = shapes.iter().map(|&(r, c)| (r * c * m) as f64).sum();
            let reps = (2000 / m).max(4);
            let (mut t_plain, mut t_grouped) = (0f64, 0f64);
            for _round in 0..3 {
                for which in 0..2 {
                    let t0 = cpu();
                    for _ in 0..reps {
                        for ((w, p), a) in mats.iter().zip(&acts) {
                            let mut out = vec![0f32; m * w.rows];
                            matmul(if which == 0 { w } else { p }, a, &mut out);
                            std::hint::black_box(&out);
                        }
                    }
                    let dt = cpu() - t0;
                    if which == 0 { t_plain += dt } else { t_grouped += dt }
                }
            }
            let g = |t: f64| macs * reps as f64 * 3.0 / t * 1e-9;
            eprintln!("{dtype} m={m:4}: plain {:.2} GMAC/s, grouped {:.2} GMAC/s ({:.2}x), grouped={}", g(t_plain), g(t_grouped), t_plain / t_grouped, mats[0].1.is_packed());
        }
    }
}

/// `exp_poly` stays within 1 ulp of e^x over its range (0.98 measured),
/// and GeGLU built on it within 32 ulp of the exact GELU-tanh (f64) where
/// the output is not tiny (24.6 measured; the tanhf form it replaced was
/// 147 069 ulp off there, from 1 + tanh(u) cancelling near -1).
#[test]
fn gelu_tanh_is_accurate() {
    // ulp of f32 at a value: the gap to the next float away from zero.
    let ulp = |v: f64| {
        let f = (v.abs() as f32).max(f32::MIN_POSITIVE);
        (f32::from_bits(f.to_bits() + 1) - f) as f64
    };
    let mut worst_exp = 0f64;
    let mut x = -87.0f32;
    while x <= 88.0 {
        let e = ((exp_poly(x) as f64) - (x as f64).exp()).abs() / ulp((x as f64).exp());
        worst_exp = worst_exp.max(e);
        x += 0.001_7;
    }
    assert!(worst_exp <= 2.0, "exp_poly: {worst_exp} ulp");
    assert_eq!(exp_poly(-1000.0), exp_poly(-87.0));
    assert!(exp_poly(1000.0).is_finite());

    let xs: Vec<f32> = (0..200_000).map(|i| -20.0 + i as f32 * 2e-4).collect();
    let ones = vec![1f32; xs.len()];
    let mut got = vec![0f32; xs.len()];
    gelu_tanh_mul(&xs, &ones, &mut got);
    // Ulp where the output is not tiny; where it is (x below about -5, the
    // output under 1e-6 |x|) e^(-2u) is large and the rounding of u alone
    // moves it by |2u| * 2^-24 relative: bounded relatively instead (the
    // tanhf form returns 0 there).
    let (mut worst, mut worst_rel, mut worst_tanhf) = (0f64, 0f64, 0f64);
    for (&x, &g) in xs.iter().zip(&got) {
        // What the engine computed before, through libm's tanhf.
        let tanhf = 0.5 * x * (1.0 + (0.797_884_6 * x * (1.0 + 0.044715 * x * x)).tanh());
        let xd = x as f64;
        // 0.5 x (1 + tanh(u)), written so f64 keeps its precision where
        // tanh(u) is near -1.
        let u = (2.0 / std::f64::consts::PI).sqrt() * (xd + 0.044715 * xd * xd * xd);
        let want = xd / (1.0 + (-2.0 * u).exp());
        if want.abs() >= 1e-6 * xd.abs() {
            worst = worst.max((g as f64 - want).abs() / ulp(want));
            worst_tanhf = worst_tanhf.max((tanhf as f64 - want).abs() / ulp(want));
        } else if want.abs() > 1e-37 {
            worst_rel = worst_rel.max((g as f64 - want).abs() / want.abs());
        }
    }
    eprintln!("exp_poly worst {worst_exp:.2} ulp, gelu_tanh_mul worst {worst:.2} ulp (the tanhf form {worst_tanhf:.2}), relative {worst_rel:.1e} where tiny");
    assert!(worst <= 32.0, "gelu_tanh_mul: {worst} ulp");
    assert!(worst_rel <= 2e-5, "gelu_tanh_mul: {worst_rel} relative where tiny");
}

/// The grouped k-quant layouts (AVX-512 VNNI only) dequantize as ggml's
/// blocks do, and `matmul` on them returns the scalar kernel's bits at
/// every tile height, with one super-block per row and several.
#[cfg(target_arch = "x86_64")]
#[test]
fn k_quants_grouped_are_bit_identical() {
    if isa() != Isa::Avx512Vnni {
        eprintln!("runtime ISA is {:?}: k-quants are not grouped here", isa());
        return;
    }
    let mut seed = 35;
    for (dtype, size, scales) in [("q4_k", 144usize, &[0usize, 2][..]), ("q6_k", 210, &[208][..])] {
        for (rows, cols) in [(32, 1024), (16, 256), (48, 2048)] {
            let w = QMatrix::from_ggml(dtype, &random_blocks(rows * cols / 256, size, scales, &mut seed), rows, cols).unwrap();
            let wp = w.clone().packed();
            assert!(wp.is_packed(), "{dtype} packs on AVX-512 VNNI");
            assert_eq!(wp.dequantize(), w.dequantize(), "grouped {dtype} values");
            for m in [1usize, 2, 3, 7, 8, 9, 17] {
                let x: Vec<f32> = (0..m * cols).map(|_| lcg(&mut seed)).collect();
                let mut act = QActs::default();
                quantize_activations(&x, cols, &mut act);
                let mut out = vec![0f32; m * rows];
                matmul(&wp, &act, &mut out);
                for i in 0..m {
                    for r in 0..rows {
                        let mut want = [0f32; TILE];
                        dot_tile(Isa::Scalar, &w, r, &act, i, 1, &mut want);
                        assert_eq!(out[i * rows + r].to_bits(), want[0].to_bits(), "{dtype} {rows}x{cols}, m {m}, row {r}, act row {i}");
                    }
                }
            }
        }
    }
}
