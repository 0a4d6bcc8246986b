//! Inputs and output buffers, owned by rung (DESIGN.md, "Runners and workers"): workers only
//! execute.
//!
//! The generator is counter-based: element `i` of input `t` at seed `s` is a pure function of
//! `(s, t, i)` (two SplitMix64 finalisers), so any process or thread draws the same values in
//! any order, and a check is reproduced from its recorded seed alone. Values are drawn in f64
//! and rounded once to the tensor's dtype (round to nearest even; fp8 saturates to its largest
//! finite value).
//!
//! Outputs are poisoned before each run, twice with two different byte patterns: an element is
//! unwritten only if it holds the first pattern after the first run and the second after the
//! second, which is exact for every dtype, integers included.

use crate::dtype::DType;
use crate::spec::Init;

const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

fn finalize(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The `i`-th random word of stream `stream` (the input's index) at `seed`.
pub fn word(seed: u64, stream: u64, i: u64) -> u64 {
    let key = finalize(seed ^ finalize(stream.wrapping_add(GOLDEN)));
    finalize(key.wrapping_add(i.wrapping_mul(GOLDEN)))
}

/// A uniform double in [0, 1).
fn unit(seed: u64, stream: u64, i: u64) -> f64 {
    (word(seed, stream, i) >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// The value of element `i` of an input with this initialisation, before rounding to its dtype.
pub fn value(init: &Init, seed: u64, stream: u64, i: u64) -> f64 {
    match *init {
        Init::Normal { mean, std } => {
            // Box–Muller on two independent words of the same stream.
            let u1 = 1.0 - unit(seed, stream, 2 * i);
            let u2 = unit(seed, stream, 2 * i + 1);
            mean + std * (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
        }
        Init::Uniform { low, high } => low + (high - low) * unit(seed, stream, i),
        Init::Randint { low, high } => {
            let span = (high - low) as u128;
            low as f64 + ((word(seed, stream, i) as u128 * span) >> 64) as f64
        }
        Init::Zeros => 0.0,
        Init::Ones => 1.0,
        Init::Arange => i as f64,
        Init::Const { value } => value,
    }
}

/// An fp8 format: exponent bits, mantissa bits, bias, and whether the top exponent holds
/// infinities (e5m2) or finite values with a single NaN code (e4m3 "fn").
struct Fp8 {
    exp_bits: u32,
    man_bits: u32,
    bias: i32,
    ieee_top: bool,
}

const E4M3: Fp8 = Fp8 { exp_bits: 4, man_bits: 3, bias: 7, ieee_top: false };
const E5M2: Fp8 = Fp8 { exp_bits: 5, man_bits: 2, bias: 15, ieee_top: true };

impl Fp8 {
    pub fn decode(&self, byte: u8) -> f64 {
        let sign = if byte & 0x80 != 0 { -1.0 } else { 1.0 };
        let exp = ((byte >> self.man_bits) & ((1 << self.exp_bits) - 1)) as i32;
        let man = (byte & ((1 << self.man_bits) - 1)) as f64;
        let top = (1 << self.exp_bits) - 1;
        let scale = (1u32 << self.man_bits) as f64;
        if self.ieee_top && exp == top {
            return if man == 0.0 { sign * f64::INFINITY } else { f64::NAN };
        }
        if !self.ieee_top && exp == top && man == scale - 1.0 {
            return f64::NAN;
        }
        if exp == 0 {
            sign * man / scale * 2f64.powi(1 - self.bias)
        } else {
            sign * (1.0 + man / scale) * 2f64.powi(exp - self.bias)
        }
    }

    /// Nearest finite code (ties to even), saturating at the largest finite magnitude.
    pub fn encode(&self, v: f64) -> u8 {
        if v.is_nan() {
            // 0x7F is a NaN in both formats (e4m3: S.1111.111; e5m2: S.11111.11).
            return 0x7F;
        }
        let sign = if v.is_sign_negative() { 0x80 } else { 0 };
        let a = v.abs();
        // Positive finite codes in increasing order of value.
        let mut best: (u8, f64) = (0, f64::INFINITY);
        for code in 0u8..0x80 {
            let x = self.decode(code);
            if !x.is_finite() {
                continue;
            }
            let d = (x - a).abs();
            if d < best.1 || (d == best.1 && code & 1 == 0) {
                best = (code, d);
            }
        }
        sign | best.0
    }
}

/// Rounds an f64 to `dtype` and appends its little-endian bytes.
pub fn push_bytes(dtype: DType, v: f64, out: &mut Vec<u8>) {
    let n = out.len();
    out.resize(n + dtype.size_bytes(), 0);
    put_bytes(dtype, v, &mut out[n..]);
}

/// Rounds an f64 to `dtype` and writes its little-endian bytes into `out` (of the dtype's size).
pub fn put_bytes(dtype: DType, v: f64, out: &mut [u8]) {
    match dtype {
        DType::F64 => out.copy_from_slice(&v.to_le_bytes()),
        DType::F32 => out.copy_from_slice(&(v as f32).to_le_bytes()),
        DType::F16 => out.copy_from_slice(&half::f16::from_f64(v).to_le_bytes()),
        DType::Bf16 => out.copy_from_slice(&half::bf16::from_f64(v).to_le_bytes()),
        DType::F8E4M3 => out[0] = E4M3.encode(v),
        DType::F8E5M2 => out[0] = E5M2.encode(v),
        DType::I8 => out[0] = (v.round() as i8) as u8,
        DType::I16 => out.copy_from_slice(&(v.round() as i16).to_le_bytes()),
        DType::I32 => out.copy_from_slice(&(v.round() as i32).to_le_bytes()),
        DType::I64 => out.copy_from_slice(&(v.round() as i64).to_le_bytes()),
        DType::U8 => out[0] = v.round() as u8,
        DType::U32 => out.copy_from_slice(&(v.round() as u32).to_le_bytes()),
    }
}

/// Reads element `i` of a little-endian buffer of `dtype` as f64 (for metrics).
pub fn read(dtype: DType, bytes: &[u8], i: usize) -> f64 {
    let s = dtype.size_bytes();
    let b = &bytes[i * s..(i + 1) * s];
    match dtype {
        DType::F64 => f64::from_le_bytes(b.try_into().expect("8 bytes")),
        DType::F32 => f32::from_le_bytes(b.try_into().expect("4 bytes")) as f64,
        DType::F16 => half::f16::from_le_bytes(b.try_into().expect("2 bytes")).to_f64(),
        DType::Bf16 => half::bf16::from_le_bytes(b.try_into().expect("2 bytes")).to_f64(),
        DType::F8E4M3 => E4M3.decode(b[0]),
        DType::F8E5M2 => E5M2.decode(b[0]),
        DType::I8 => b[0] as i8 as f64,
        DType::I16 => i16::from_le_bytes(b.try_into().expect("2 bytes")) as f64,
        DType::I32 => i32::from_le_bytes(b.try_into().expect("4 bytes")) as f64,
        DType::I64 => i64::from_le_bytes(b.try_into().expect("8 bytes")) as f64,
        DType::U8 => b[0] as f64,
        DType::U32 => u32::from_le_bytes(b.try_into().expect("4 bytes")) as f64,
    }
}

/// Every element of a buffer as f64 (a trailing partial element is left out). A large buffer
/// (a benchmark-size output) is converted on every core, a dtype's loop at a time.
pub fn to_f64(dtype: DType, bytes: &[u8]) -> Vec<f64> {
    let s = dtype.size_bytes();
    let n = bytes.len() / s;
    let mut out = vec![0f64; n];
    let threads = std::thread::available_parallelism().map_or(1, |t| t.get()).min(32);
    if n < 1 << 20 || threads < 2 {
        convert(dtype, &bytes[..n * s], &mut out);
        return out;
    }
    let chunk = n.div_ceil(threads);
    std::thread::scope(|scope| {
        for (k, dst) in out.chunks_mut(chunk).enumerate() {
            let src = &bytes[k * chunk * s..(k * chunk + dst.len()) * s];
            scope.spawn(move || convert(dtype, src, dst));
        }
    });
    out
}

/// `to_f64` into `out` (resized to the element count), on this thread: what a caller that
/// converts a large buffer piece by piece reuses, so its memory is allocated once.
pub fn to_f64_into(dtype: DType, bytes: &[u8], out: &mut Vec<f64>) {
    let n = bytes.len() / dtype.size_bytes();
    out.resize(n, 0.0);
    convert(dtype, &bytes[..n * dtype.size_bytes()], out);
}

/// Converts whole elements of `src` into `dst` (as many as `dst` holds), one loop per dtype.
fn convert(dtype: DType, src: &[u8], dst: &mut [f64]) {
    macro_rules! each {
        ($w:literal, $f:expr) => {
            for (d, b) in dst.iter_mut().zip(src.chunks_exact($w)) {
                *d = $f(<[u8; $w]>::try_from(b).expect("chunks_exact"));
            }
        };
    }
    match dtype {
        DType::F64 => each!(8, f64::from_le_bytes),
        DType::F32 => each!(4, |b| f32::from_le_bytes(b) as f64),
        DType::I32 => each!(4, |b| i32::from_le_bytes(b) as f64),
        DType::U32 => each!(4, |b| u32::from_le_bytes(b) as f64),
        DType::I64 => each!(8, |b| i64::from_le_bytes(b) as f64),
        DType::F16 => each!(2, |b| half::f16::from_le_bytes(b).to_f64()),
        DType::Bf16 => each!(2, |b| half::bf16::from_le_bytes(b).to_f64()),
        DType::I16 => each!(2, |b| i16::from_le_bytes(b) as f64),
        _ => {
            for (i, d) in dst.iter_mut().enumerate() {
                *d = read(dtype, src, i);
            }
        }
    }
}

/// The bytes of input number `stream` with `numel` elements, at `seed`. Every element is a pure
/// function of (seed, stream, index), so large inputs are drawn on every core in parts written in
/// place, and the bytes are the same as drawing them in order.
pub fn generate(dtype: DType, init: &Init, seed: u64, stream: u64, numel: usize) -> Vec<u8> {
    let s = dtype.size_bytes();
    let mut out = vec![0u8; numel * s];
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(32);
    if numel < 1 << 20 || threads < 2 {
        generate_into(dtype, init, seed, stream, 0, &mut out);
        return out;
    }
    let chunk = numel.div_ceil(threads);
    std::thread::scope(|scope| {
        for (t, part) in out.chunks_mut(chunk * s).enumerate() {
            scope.spawn(move || generate_into(dtype, init, seed, stream, t * chunk, part));
        }
    });
    out
}

/// [`generate`]'s bytes for the elements from `start` on, as many as `out` holds, written into
/// `out`: any part of an input, drawn by any thread, into a buffer or a mapped file.
pub fn generate_into(dtype: DType, init: &Init, seed: u64, stream: u64, start: usize, out: &mut [u8]) {
    for (j, dst) in out.chunks_exact_mut(dtype.size_bytes()).enumerate() {
        put_bytes(dtype, value(init, seed, stream, (start + j) as u64), dst);
    }
}

/// The two poison bytes: a buffer is filled with one, then the other, before the two runs.
pub const POISON: [u8; 2] = [0xA5, 0x5A];

/// Indices of elements that were not written: they hold the first poison after the first run
/// and the second poison after the second.
pub fn unwritten(first: &[u8], second: &[u8], elem_size: usize) -> Vec<usize> {
    let n = first.len().min(second.len()) / elem_size;
    (0..n)
        .filter(|&i| {
            let r = i * elem_size..(i + 1) * elem_size;
            first[r.clone()].iter().all(|b| *b == POISON[0]) && second[r].iter().all(|b| *b == POISON[1])
        })
        .collect()
}

#[cfg(test)]
mod tests {
    /// The fast conversion (a loop per dtype, on every core past 1M elements) reads exactly what
    /// `read` reads, element by element, NaN bit patterns and a trailing partial element included.
    #[test]
    fn to_f64_is_read_element_by_element_for_every_dtype() {
        for dtype in crate::dtype::ALL {
            for n in [0usize, 5, (1 << 20) + 3] {
                let len = n * dtype.size_bytes() + 1;
                let bytes: Vec<u8> =
                    (0..len as u64).map(|i| (i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as u8).collect();
                let fast = super::to_f64(dtype, &bytes);
                assert_eq!(fast.len(), len / dtype.size_bytes(), "{dtype:?}");
                for (i, x) in fast.iter().enumerate() {
                    let slow = super::read(dtype, &bytes, i);
                    assert!(x.to_bits() == slow.to_bits() || (x.is_nan() && slow.is_nan()), "{dtype:?} [{i}]");
                }
            }
        }
    }

    use super::*;

    #[test]
    fn drawing_in_parallel_gives_the_same_bytes_as_in_order() {
        let init = Init::Normal { mean: 0.0, std: 1.0 };
        let n = (1 << 20) + 12345;
        let parallel = generate(DType::F32, &init, 42, 3, n);
        let mut serial = Vec::new();
        for i in 0..n as u64 {
            push_bytes(DType::F32, value(&init, 42, 3, i), &mut serial);
        }
        assert_eq!(parallel, serial);
    }

    #[test]
    fn reproducible_and_seed_dependent() {
        let init = Init::Normal { mean: 0.0, std: 1.0 };
        let a = generate(DType::F32, &init, 42, 0, 1000);
        assert_eq!(a, generate(DType::F32, &init, 42, 0, 1000));
        assert_ne!(a, generate(DType::F32, &init, 43, 0, 1000));
        assert_ne!(a, generate(DType::F32, &init, 42, 1, 1000), "each input has its own stream");
        // Element i does not depend on how many are drawn.
        assert_eq!(&generate(DType::F32, &init, 42, 0, 10)[..], &a[..40]);
    }

    #[test]
    fn pinned_values() {
        // Changing the generator changes every recorded check's inputs: these pin it.
        assert_eq!(word(0, 0, 0), 0x33fe_8bd4_f9c5_7863);
        assert_eq!(word(7, 3, 11), 0x511b_ff13_b69f_217e);
        let u: Vec<f64> = (0..3).map(|i| value(&Init::Uniform { low: 0.0, high: 1.0 }, 7, 0, i)).collect();
        assert_eq!(u, vec![0.7329716820015753, 0.4813487918628434, 0.6648769131856519]);
    }

    #[test]
    fn distributions() {
        let n = 100_000u64;
        let normal: Vec<f64> = (0..n).map(|i| value(&Init::Normal { mean: 2.0, std: 3.0 }, 1, 0, i)).collect();
        let mean = normal.iter().sum::<f64>() / n as f64;
        let var = normal.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n as f64;
        assert!((mean - 2.0).abs() < 0.05, "{mean}");
        assert!((var.sqrt() - 3.0).abs() < 0.05, "{}", var.sqrt());
        let ints: Vec<f64> = (0..n).map(|i| value(&Init::Randint { low: -3, high: 4 }, 1, 1, i)).collect();
        for k in -3..4 {
            let count = ints.iter().filter(|x| **x == k as f64).count();
            assert!((count as f64 - n as f64 / 7.0).abs() < 1000.0, "{k}: {count}");
        }
        assert!(ints.iter().all(|x| (-3.0..4.0).contains(x)));
    }

    #[test]
    fn dtype_round_trips() {
        for d in crate::dtype::ALL {
            let mut bytes = Vec::new();
            for v in [0.0, 1.0, -2.0, 3.0] {
                push_bytes(d, v, &mut bytes);
            }
            assert_eq!(bytes.len(), 4 * d.size_bytes(), "{d}");
            let back = to_f64(d, &bytes);
            let expect: Vec<f64> =
                if d == DType::U8 || d == DType::U32 { vec![0.0, 1.0, 0.0, 3.0] } else { vec![0.0, 1.0, -2.0, 3.0] };
            assert_eq!(back, expect, "{d}");
        }
    }

    #[test]
    fn fp8_rounding_and_saturation() {
        assert_eq!(E4M3.decode(0x7E), 448.0);
        assert!(E4M3.decode(0x7F).is_nan());
        assert_eq!(E4M3.decode(0x01), 2f64.powi(-9));
        assert_eq!(E4M3.decode(E4M3.encode(1000.0)), 448.0, "saturates");
        assert_eq!(E4M3.decode(E4M3.encode(1.0625)), 1.0, "a tie rounds to the even mantissa");
        assert_eq!(E4M3.decode(E4M3.encode(-0.3)), -0.3125);
        assert_eq!(E5M2.decode(0x7B), 57344.0);
        assert_eq!(E5M2.decode(0x7C), f64::INFINITY);
        for code in 0u8..=255 {
            let v = E4M3.decode(code);
            if v.is_finite() && v != 0.0 {
                assert_eq!(E4M3.encode(v), code, "e4m3 {code:#x} = {v}");
            }
        }
    }

    #[test]
    fn unwritten_elements_need_both_poisons() {
        // Four i32 outputs: 0 written, 1 unwritten, 2 written with a value equal to poison A
        // (caught by the second run), 3 written with poison B's value.
        let a = POISON[0];
        let b = POISON[1];
        let first = [[1, 0, 0, 0], [a, a, a, a], [a, a, a, a], [b, b, b, b]].concat();
        let second = [[1, 0, 0, 0], [b, b, b, b], [a, a, a, a], [b, b, b, b]].concat();
        assert_eq!(unwritten(&first, &second, 4), vec![1]);
    }
}
