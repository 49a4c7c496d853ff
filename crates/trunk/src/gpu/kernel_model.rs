//! CPU models the kernel tests share (test builds only): a warp's sums
//! in the kernels' orders, the kernels' sources and their constants, and
//! the shared-memory wavefronts of a warp's access.

use super::nvrtc;
use crate::synth::rng::Rng;

/// A kernel source file as the engine compiles it (`nvrtc::SOURCES`).
pub(super) fn source(name: &str) -> &'static str {
    nvrtc::SOURCES.iter().find(|(n, _)| *n == name).unwrap_or_else(|| panic!("no kernel source {name}")).1
}

/// kernels/common.cuh `warp_sum`: lane l adds lane l ^ o's value, o = 16, 8, 4, 2, 1.
pub(super) fn butterfly(mut v: [f64; 32]) -> f64 {
    for o in [16, 8, 4, 2, 1] {
        let prev = v;
        for (l, x) in v.iter_mut().enumerate() {
            *x = prev[l] + prev[l ^ o];
        }
    }
    v[0]
}

/// A reduce-scatter of W sums a lane over the warp: halved at each o
/// of `halve` (each lane keeps the half its bit o selects and adds the
/// partner's same half), then the one left summed at each o of `rest`
/// as `warp_sum` does. Returns each lane's (the value its bits select,
/// its total). kernels/indexer.cu `indexer_scores`: W = 8, halved at
/// 16, 8, 4, then 2 and 1; kernels/common.cuh `warp_sums32`: W = 32,
/// halved at 16, 8, 4, 2, 1.
pub(super) fn reduce_scatter<const W: usize>(d: &[[f64; W]; 32], halve: &[usize], rest: &[usize]) -> Vec<(usize, f64)> {
    let mut d = *d;
    let mut width = W;
    for &o in halve {
        width /= 2;
        let prev = d;
        for (l, dl) in d.iter_mut().enumerate() {
            let j0 = if l & o != 0 { width } else { 0 };
            for (i, x) in dl.iter_mut().take(width).enumerate() {
                *x = prev[l][j0 + i] + prev[l ^ o][j0 + i];
            }
        }
    }
    for &o in rest {
        let prev = d;
        for (l, dl) in d.iter_mut().enumerate() {
            dl[0] = prev[l][0] + prev[l ^ o][0];
        }
    }
    (0..32)
        .map(|l| {
            let mut width = W;
            let value = halve.iter().fold(0, |v, &o| {
                width /= 2;
                v + if l & o != 0 { width } else { 0 }
            });
            (value, d[l][0])
        })
        .collect()
}

/// `reduce_scatter` of `halve` and `rest` on random lanes gives each
/// value the butterfly's bits on the lanes `writes` selects, and the
/// halvings in the order `swapped` do not (the test's teeth).
pub(super) fn assert_butterfly_bits<const W: usize>(
    seed: u64,
    halve: &[usize],
    rest: &[usize],
    swapped: &[usize],
    writes: impl Fn(usize) -> bool,
) {
    let mut rng = Rng::new(seed, "reduce_scatter", W as u64);
    let mut other_order_differs = false;
    for _ in 0..2000 {
        let d: [[f64; W]; 32] = std::array::from_fn(|_| std::array::from_fn(|_| spread(&mut rng)));
        let want: Vec<f64> = (0..W).map(|k| butterfly(std::array::from_fn(|l| d[l][k]))).collect();
        let got = reduce_scatter(&d, halve, rest);
        let mut written: Vec<usize> = (0..32).filter(|&l| writes(l)).map(|l| got[l].0).collect();
        written.sort_unstable();
        assert_eq!(written, (0..W).collect::<Vec<_>>(), "each value written once");
        for l in (0..32).filter(|&l| writes(l)) {
            let (k, v) = got[l];
            assert_eq!(v.to_bits(), want[k].to_bits(), "value {k} on lane {l}");
        }
        other_order_differs |= reduce_scatter(&d, swapped, rest)
            .iter()
            .enumerate()
            .any(|(l, &(k, v))| writes(l) && v.to_bits() != want[k].to_bits());
    }
    assert!(other_order_differs, "a different pairing never changed a sum: the test has no teeth");
}

/// The value of `#define name N` in kernels/`file` (a number).
pub(super) fn kernel_define(file: &str, name: &str) -> usize {
    let src = source(file);
    let at = src.find(&format!("#define {name} ")).unwrap_or_else(|| panic!("{file}: {name}"));
    src[at..].split_whitespace().nth(2).and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("{file}: {name}"))
}

/// A random double of either sign, its magnitude spread over 2^-30 to
/// 2^30, so that sums of such values in other orders round otherwise.
pub(super) fn spread(rng: &mut Rng) -> f64 {
    let sign = if rng.next_u64() & 1 == 0 { 1.0 } else { -1.0 };
    let exp = (rng.next_u64() % 61) as i32 - 30;
    sign * rng.uniform() * 2f64.powi(exp)
}

/// Wavefronts a warp's shared-memory access of 8-byte words takes (the
/// most distinct words in one of the 16 double-wide banks).
pub(super) fn wavefronts(words: impl Iterator<Item = usize>) -> usize {
    let mut banks: Vec<Vec<usize>> = vec![Vec::new(); 16];
    for w in words {
        if !banks[w % 16].contains(&w) {
            banks[w % 16].push(w);
        }
    }
    banks.iter().map(Vec::len).max().unwrap()
}
