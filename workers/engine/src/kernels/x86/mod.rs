//! x86-64 kernels by vector width.

pub(super) mod avx2;
pub(super) mod avx512;
