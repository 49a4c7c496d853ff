//! The low-precision number formats of DSV4 checkpoints, decoded and encoded
//! bit-exactly.
//!
//! - FP8 E4M3 (`float8_e4m3fn`): 1 sign, 4 exponent (bias 7), 3 mantissa bits,
//!   no infinities, `S.1111.111` is NaN, largest finite 448.
//! - E8M0 (`float8_e8m0fnu`): an unsigned power of two `2^(e-127)`; 255 is NaN.
//! - FP4 E2M1 (`float4_e2m1fn_x2` packs two per byte, low nibble first):
//!   1 sign, 2 exponent (bias 1), 1 mantissa bit: 0, .5, 1, 1.5, 2, 3, 4, 6.
//!
//! Encoders round to nearest, ties to even, and saturate (callers clamp to
//! the largest finite value first, as the reference does).

use half::{bf16, f16};

/// Largest finite E4M3 value.
pub const E4M3_MAX: f32 = 448.0;
/// Largest E2M1 value.
pub const E2M1_MAX: f32 = 6.0;

const fn e4m3_value(code: u8) -> f32 {
    let sign = if code & 0x80 != 0 { -1.0 } else { 1.0 };
    let exp = ((code >> 3) & 0xF) as i32;
    let man = (code & 0x7) as i32;
    if exp == 0xF && man == 0x7 {
        return f32::NAN;
    }
    let mag = if exp == 0 {
        // subnormal: man/8 * 2^-6
        man as f32 / 8.0 / 64.0
    } else {
        let m = 1.0 + man as f32 / 8.0;
        let mut p = 1.0f32;
        let mut e = exp - 7;
        while e > 0 {
            p *= 2.0;
            e -= 1;
        }
        while e < 0 {
            p /= 2.0;
            e += 1;
        }
        m * p
    };
    sign * mag
}

const fn build_e4m3_table() -> [f32; 256] {
    let mut t = [0.0f32; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = e4m3_value(i as u8);
        i += 1;
    }
    t
}

/// Every E4M3 code's value.
pub static E4M3_TABLE: [f32; 256] = build_e4m3_table();

/// The eight E2M1 magnitudes, by the low three bits of a code.
pub const E2M1_MAGNITUDES: [f32; 8] = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0];

/// Every E2M1 code's value (bit 3 is the sign).
pub const E2M1_TABLE: [f32; 16] =
    [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0];

#[inline]
pub fn e4m3_to_f32(code: u8) -> f32 {
    E4M3_TABLE[code as usize]
}

#[inline]
pub fn e8m0_to_f32(code: u8) -> f32 {
    match code {
        255 => f32::NAN,
        // 2^-127 is an f32 subnormal
        0 => f32::from_bits(0x0040_0000),
        e => f32::from_bits((e as u32) << 23),
    }
}

#[inline]
pub fn e2m1_to_f32(nibble: u8) -> f32 {
    E2M1_TABLE[(nibble & 0xF) as usize]
}

/// Round `x` to the nearest of `grid` (sorted non-negative magnitudes),
/// ties to the even index; values beyond the last point saturate.
#[cfg(test)]
fn round_to_grid(mag: f32, grid: &[f32]) -> usize {
    // binary search for the first grid point >= mag
    let mut lo = 0usize;
    let mut hi = grid.len();
    while lo < hi {
        let mid = (lo + hi) / 2;
        if grid[mid] < mag {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    if lo == 0 {
        return 0;
    }
    if lo == grid.len() {
        return grid.len() - 1;
    }
    let below = grid[lo - 1];
    let above = grid[lo];
    let d_below = mag - below;
    let d_above = above - mag;
    if d_below < d_above {
        lo - 1
    } else if d_above < d_below {
        lo
    } else if (lo - 1).is_multiple_of(2) {
        lo - 1
    } else {
        lo
    }
}

#[cfg(test)]
static E4M3_MAGNITUDES: std::sync::LazyLock<Vec<f32>> =
    std::sync::LazyLock::new(|| (0u8..0x7F).map(e4m3_value).collect());

/// `v.round_ties_even()` for `0 <= v < 2^23`, inline: x86-64's baseline
/// has no rounding instruction, so the method is a libm call, the largest
/// cost of quantizing a synthetic model. `v + 2^23` lies where f32's spacing
/// is 1, so the addition itself rounds `v` to the nearest integer, ties to
/// even; taking `2^23` away again is exact.
#[inline]
fn round_ties_even_small(v: f32) -> f32 {
    const TWO_23: f32 = 8_388_608.0;
    debug_assert!((0.0..TWO_23).contains(&v), "{v}");
    (v + TWO_23) - TWO_23
}

/// Encode to E4M3: round to nearest even, saturating at 448. NaN maps to NaN.
///
/// Codes of non-negative values increase with the value: subnormals are
/// `m = rte(a * 2^9)` (m = 8 is the first normal), normals in binade
/// `[2^e, 2^(e+1))` are `(e + 7) * 8 + rte(a / 2^(e-3)) - 8`.
pub fn f32_to_e4m3(x: f32) -> u8 {
    if x.is_nan() {
        return 0x7F;
    }
    let sign = if x.is_sign_negative() { 0x80u8 } else { 0 };
    let a = x.abs();
    let code = if a < 0.015625 {
        round_ties_even_small(a * 512.0) as u32
    } else if a >= E4M3_MAX {
        0x7E
    } else {
        let e = ((a.to_bits() >> 23) as i32) - 127;
        let q = round_ties_even_small(a * f32::from_bits(((127 - (e - 3)) as u32) << 23)) as u32;
        ((e + 7) as u32) * 8 + q - 8
    };
    sign | code.min(0x7E) as u8
}

/// Encode to E2M1 (a nibble): round to nearest even, saturating at 6.
pub fn f32_to_e2m1(x: f32) -> u8 {
    let sign = if x.is_sign_negative() { 0x8u8 } else { 0 };
    let a = if x.is_nan() { 0.0 } else { x.abs() };
    let code = if a < 1.0 {
        round_ties_even_small(a * 2.0) as u32
    } else if a >= 8.0 {
        7
    } else {
        let e = ((a.to_bits() >> 23) as i32) - 127;
        let q = round_ties_even_small(a * f32::from_bits(((127 - (e - 1)) as u32) << 23)) as u32;
        ((e + 1) as u32) * 2 + q - 2
    };
    sign | code.min(7) as u8
}

/// Grid rounding kept as the reference the fast encoders are tested against.
#[cfg(test)]
fn grid_e4m3(x: f32) -> u8 {
    let sign = if x.is_sign_negative() { 0x80u8 } else { 0 };
    sign | round_to_grid(x.abs(), &E4M3_MAGNITUDES) as u8
}

/// The smallest power of two `2^k` with `amax / 2^k <= max_code`, as the
/// UE8M0 reference computes it (`2^ceil(log2(amax / max_code))`).
pub fn pow2_scale_for(amax: f32, max_code: f32) -> f32 {
    let ratio = amax / max_code;
    // ceil(log2(ratio)) exactly: take the exponent, bump it if any mantissa bit is set.
    let bits = ratio.to_bits();
    let exp = ((bits >> 23) & 0xFF) as i32;
    let man = bits & 0x7F_FFFF;
    if exp == 0 {
        // subnormal ratio: scale 2^-126 is the smallest normal, enough for our ranges
        return f32::from_bits(1 << 23);
    }
    let e = if man != 0 { exp + 1 } else { exp };
    f32::from_bits((e.clamp(1, 254) as u32) << 23)
}

/// E8M0 code of a power-of-two scale.
pub fn e8m0_of_pow2(scale: f32) -> u8 {
    let bits = scale.to_bits();
    debug_assert_eq!(bits & 0x7F_FFFF, 0, "not a power of two: {scale}");
    ((bits >> 23) & 0xFF) as u8
}

#[inline]
pub fn bf16_to_f32(bits: u16) -> f32 {
    bf16::from_bits(bits).to_f32()
}

#[inline]
pub fn f16_to_f32(bits: u16) -> f32 {
    f16::from_bits(bits).to_f32()
}

/// f32 -> bf16 bits, round to nearest even (NaN stays NaN).
#[inline]
pub fn f32_to_bf16(x: f32) -> u16 {
    bf16::from_f32(x).to_bits()
}

/// Quantize-dequantize a vector through FP8 E4M3 in blocks of `block`, each
/// with a power-of-two scale from the block's absolute maximum (floored at
/// `1e-4`, as the reference does). This is the reference's `act_quant`.
pub fn fp8_roundtrip_blocks(x: &mut [f32], block: usize) {
    for chunk in x.chunks_mut(block) {
        let amax = chunk.iter().fold(0.0f32, |m, v| m.max(v.abs())).max(1e-4);
        let s = pow2_scale_for(amax, E4M3_MAX);
        for v in chunk.iter_mut() {
            let q = (*v / s).clamp(-E4M3_MAX, E4M3_MAX);
            *v = e4m3_to_f32(f32_to_e4m3(q)) * s;
        }
    }
}

/// Quantize-dequantize through FP4 E2M1 in blocks of `block` with a
/// power-of-two scale (amax floored at `6 * 2^-126`), the reference's
/// `fp4_act_quant`.
pub fn fp4_roundtrip_blocks(x: &mut [f32], block: usize) {
    let floor = E2M1_MAX * f32::from_bits(1 << 23);
    for chunk in x.chunks_mut(block) {
        let amax = chunk.iter().fold(0.0f32, |m, v| m.max(v.abs())).max(floor);
        let s = pow2_scale_for(amax, E2M1_MAX);
        for v in chunk.iter_mut() {
            let q = (*v / s).clamp(-E2M1_MAX, E2M1_MAX);
            *v = e2m1_to_f32(f32_to_e2m1(q)) * s;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn fixture() -> Value {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/codepoints.json");
        serde_json::from_str(&std::fs::read_to_string(path).expect("codepoints fixture")).unwrap()
    }

    fn same(a: f32, b: f32) -> bool {
        (a.is_nan() && b.is_nan()) || a.to_bits() == b.to_bits()
    }

    #[test]
    fn e4m3_matches_torch_on_every_code() {
        let fx = fixture();
        let want = fx["e4m3_decode"].as_array().unwrap();
        assert_eq!(want.len(), 256);
        for (code, w) in want.iter().enumerate() {
            let w = f32::from_bits(w.as_u64().unwrap() as u32);
            assert!(same(e4m3_to_f32(code as u8), w), "code {code:#04x}: ours {} torch {w}", e4m3_to_f32(code as u8));
        }
    }

    #[test]
    fn e8m0_matches_torch_on_every_code() {
        let fx = fixture();
        for (code, w) in fx["e8m0_decode"].as_array().unwrap().iter().enumerate() {
            let w = f32::from_bits(w.as_u64().unwrap() as u32);
            assert!(same(e8m0_to_f32(code as u8), w), "code {code}: ours {} torch {w}", e8m0_to_f32(code as u8));
        }
    }

    #[test]
    fn e2m1_pairs_match_torch_on_every_byte() {
        let fx = fixture();
        for (byte, pair) in fx["e2m1_x2_decode"].as_array().unwrap().iter().enumerate() {
            let lo = f32::from_bits(pair[0].as_u64().unwrap() as u32);
            let hi = f32::from_bits(pair[1].as_u64().unwrap() as u32);
            assert!(same(e2m1_to_f32(byte as u8 & 0xF), lo), "byte {byte:#04x} low");
            assert!(same(e2m1_to_f32(byte as u8 >> 4), hi), "byte {byte:#04x} high");
        }
    }

    #[test]
    fn e4m3_encoder_matches_torch_cast() {
        let fx = fixture();
        let cases = fx["e4m3_encode"].as_array().unwrap();
        assert!(cases.len() > 2000);
        for c in cases {
            let x = f32::from_bits(c[0].as_u64().unwrap() as u32);
            let want = c[1].as_u64().unwrap() as u8;
            let got = f32_to_e4m3(x.clamp(-E4M3_MAX, E4M3_MAX));
            // -0 and +0 both decode to zero; torch keeps the sign, so do we.
            assert_eq!(got, want, "x = {x:e}: ours {got:#04x} torch {want:#04x}");
        }
    }

    #[test]
    fn e2m1_encoder_matches_torch() {
        let fx = fixture();
        for c in fx["e2m1_encode"].as_array().unwrap() {
            let x = f32::from_bits(c[0].as_u64().unwrap() as u32);
            let want = c[1].as_u64().unwrap() as u8;
            let got = f32_to_e2m1(x.clamp(-E2M1_MAX, E2M1_MAX));
            assert_eq!(got, want, "x = {x:e}: ours {got:#x} torch {want:#x}");
        }
    }

    #[test]
    fn inline_rounding_is_round_ties_even() {
        // every tie below 2^12, its neighbours, and a stride through every
        // f32 bit pattern below 16 (the encoders' range) and up to 2^23
        let check = |v: f32| assert_eq!(round_ties_even_small(v), v.round_ties_even(), "v = {v:e}");
        for k in 0..4096u32 {
            let t = k as f32 + 0.5;
            check(t);
            check(f32::from_bits(t.to_bits() - 1));
            check(f32::from_bits(t.to_bits() + 1));
        }
        for bits in (0..16f32.to_bits()).step_by(97) {
            check(f32::from_bits(bits));
        }
        for bits in (16f32.to_bits()..8_388_608f32.to_bits()).step_by(9973) {
            check(f32::from_bits(bits));
        }
    }

    #[test]
    fn fast_e4m3_encoder_equals_grid_rounding() {
        let mut r = crate::synth::rng::Rng::new(3, "enc", 0);
        for i in 0..200_000u32 {
            let u = (r.next_u64() >> 40) as f32 / (1u64 << 24) as f32;
            let x = (u - 0.5) * 2.0 * 2f32.powi((i % 24) as i32 - 14);
            let x = x.clamp(-E4M3_MAX, E4M3_MAX);
            assert_eq!(f32_to_e4m3(x), grid_e4m3(x), "x = {x:e}");
        }
        for code in 0u8..0x7F {
            let v = e4m3_to_f32(code);
            assert_eq!(f32_to_e4m3(v), code, "code {code:#x} round trip");
        }
    }

    #[test]
    fn pow2_scale_is_the_ceiling_power() {
        assert_eq!(pow2_scale_for(448.0, 448.0), 1.0);
        assert_eq!(pow2_scale_for(449.0, 448.0), 2.0);
        assert_eq!(pow2_scale_for(224.0, 448.0), 0.5);
        assert_eq!(pow2_scale_for(6.0, 6.0), 1.0);
        assert_eq!(pow2_scale_for(6.1, 6.0), 2.0);
        assert_eq!(e8m0_of_pow2(1.0), 127);
    }

    #[test]
    fn fp8_roundtrip_keeps_block_max_representable() {
        let mut v: Vec<f32> = (0..256).map(|i| (i as f32 - 128.0) * 0.37).collect();
        let orig = v.clone();
        fp8_roundtrip_blocks(&mut v, 128);
        for (a, b) in v.iter().zip(&orig) {
            // E4M3 has 3 mantissa bits: relative error at most 2^-4
            assert!((a - b).abs() <= b.abs() / 16.0 + 1e-6, "{a} vs {b}");
        }
        assert_ne!(v, orig, "rounding must change some values");
    }
}
