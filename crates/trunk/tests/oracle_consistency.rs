//! The CPU oracle computes one function however a sequence is chunked.

use std::sync::Arc;

use trunk::cpu::{CpuOracle, Logits, Variant};
use trunk::synth::{in_memory, Preset, Synth};
use trunk::weights::{Dsv4Weights, ExpertArm};

fn tiny(variant: Variant) -> CpuOracle {
    let s = Synth::new(Preset::Tiny, 7);
    let src = in_memory(&s).unwrap();
    let w = Dsv4Weights::load(&src, &s.config, ExpertArm::Native).unwrap();
    CpuOracle::new(Arc::new(w), variant)
}

fn prompt(n: usize) -> Vec<u32> {
    (0..n).map(|i| ((i * 7919 + 13) % 300) as u32 + 2).collect()
}

#[test]
fn chunked_and_stepwise_match_full_forward() {
    for variant in [Variant::Exact, Variant::Fp8] {
        let o = tiny(variant);
        let toks = prompt(80);
        let v = o.weights.config.vocab_size;
        let mut s = o.new_state(128);
        let full = o.forward(&mut s, &toks, Logits::All).unwrap();
        let mut s2 = o.new_state(128);
        let mut step = Vec::new();
        let mut i = 0;
        for w in [1usize, 7, 3, 32, 1, 36] {
            step.extend(o.forward(&mut s2, &toks[i..i + w], Logits::All).unwrap());
            i += w;
        }
        assert_eq!(i, 80);
        let mut max_rel = 0.0f64;
        for p in 0..80 {
            let a = &full[p * v..(p + 1) * v];
            let b = &step[p * v..(p + 1) * v];
            let amax = a.iter().fold(0.0f32, |m, x| m.max(x.abs())) as f64;
            let diff = a.iter().zip(b).fold(0.0f32, |m, (x, y)| m.max((x - y).abs())) as f64;
            max_rel = max_rel.max(diff / amax);
        }
        assert_eq!(max_rel, 0.0, "{variant}: chunked vs full differ (max rel {max_rel})");
    }
}

#[test]
fn moe_arms_give_identical_bits() {
    use trunk::cpu::ops::moe::MoeArm;
    for variant in [Variant::Exact, Variant::Fp8] {
        let mut o = tiny(variant);
        let toks = prompt(48);
        let v = o.weights.config.vocab_size;
        let mut s = o.new_state(48);
        let a = o.forward(&mut s, &toks, Logits::All).unwrap();
        o.moe = MoeArm::Fused;
        let mut s = o.new_state(48);
        let b = o.forward(&mut s, &toks, Logits::All).unwrap();
        assert_eq!(a.len(), 48 * v);
        assert!(a == b, "{variant}: fused and per-expert MoE differ");
    }
}

/// No tokens is an error, as on the GPU, not an index out of bounds.
#[test]
fn an_empty_chunk_is_refused() {
    let o = tiny(Variant::Exact);
    let mut st = o.new_state(8);
    let e = o.forward(&mut st, &[], Logits::All).unwrap_err();
    assert!(format!("{e}").contains("no tokens"), "{e}");
    assert_eq!(kvstate::StateStore::positions(&st), 0);
}
