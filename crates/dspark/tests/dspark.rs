//! The DSpark drafter on its own: commits are chunk invariant and atomic,
//! the heads are consistent with what they report, state survives a
//! snapshot into a fresh drafter, and bad inputs give clear errors.

use std::path::Path;
use std::sync::Arc;

use dspark::model::{Dspark, DsparkWeights};
use dspark::parse_options;
use kvstate::{restore, snapshot, StateStore};
use trunk::cpu::forward::Logits;
use trunk::cpu::ops::moe::MoeArm;
use trunk::cpu::{CpuOracle, Variant};
use trunk::synth::write::{write_model, WriteOptions};
use trunk::synth::{Preset, Synth};
use trunk::weights::{CheckpointLayout, ExpertArm};

fn write(dir: &Path, dspark: bool) {
    let mut s = Synth::new(Preset::Tiny, 11);
    if dspark {
        s = s.with_dspark();
    }
    let opts = WriteOptions { layout: CheckpointLayout::Official, shard_bytes: 1 << 30 };
    write_model(&s, dir, &opts, &mut |_, _| {}).unwrap();
}

/// Weights, and the taps of a 40-token prompt run through the CPU oracle.
fn setup(dir: &Path) -> (Arc<DsparkWeights>, Vec<f32>, Vec<u32>) {
    write(dir, true);
    let w = Arc::new(DsparkWeights::load(dir).unwrap());
    let model = trunk::model::open_model(dir, ExpertArm::Native).unwrap();
    let oracle = CpuOracle::new(model.weights.clone(), Variant::Exact);
    let tokens: Vec<u32> = (0..40u32).map(|i| (i * 37 + 5) % w.cfg.vocab_size as u32).collect();
    let mut st = oracle.new_state(64);
    let layers: Vec<usize> = w.ds.target_layer_ids.clone();
    let (_, taps) = oracle.forward_taps(&mut st, &tokens, Logits::None, &layers).unwrap();
    (w, taps, tokens)
}

#[test]
fn commit_is_chunk_invariant_and_proposals_are_deterministic() {
    let tmp = tempfile::tempdir().unwrap();
    let (w, taps, tokens) = setup(tmp.path());
    let mut whole = Dspark::new(w.clone(), Variant::Exact, 64);
    let tw = whole.tap_width();
    assert_eq!(taps.len(), tokens.len() * tw);
    whole.commit(0, &taps).unwrap();
    let mut pieces = Dspark::new(w.clone(), Variant::Exact, 64);
    let mut p = 0;
    for n in [1usize, 7, 3, 16, 13] {
        pieces.commit(p, &taps[p * tw..(p + n) * tw]).unwrap();
        p += n;
    }
    assert_eq!(p, tokens.len());
    let (a, b) = (snapshot(&whole.state).unwrap(), snapshot(&pieces.state).unwrap());
    assert!(a.differing_classes(&b).is_empty(), "ring rows differ: {:?}", a.differing_classes(&b));
    let (d1, c1, _) = whole.forward_spec(tokens[39]).unwrap();
    let (d2, c2, _) = pieces.forward_spec(tokens[39]).unwrap();
    assert_eq!(d1, d2);
    assert_eq!(c1.iter().map(|c| c.to_bits()).collect::<Vec<_>>(), c2.iter().map(|c| c.to_bits()).collect::<Vec<_>>());
    assert_eq!(d1.len(), w.ds.block_size);
    // a different history gives different ring rows: the comparison above has teeth
    let mut other = Dspark::new(w, Variant::Exact, 64);
    other.commit(0, &taps[tw..]).unwrap();
    assert!(!snapshot(&other.state).unwrap().differing_classes(&a).is_empty());
}

#[test]
fn heads_agree_with_their_capture() {
    let tmp = tempfile::tempdir().unwrap();
    let (w, taps, tokens) = setup(tmp.path());
    let mut ds = Dspark::new(w.clone(), Variant::Exact, 64);
    ds.commit(0, &taps).unwrap();
    let anchor = tokens[39];
    let (drafts, conf, cap) = ds.forward_spec(anchor).unwrap();
    let (g, v, r) = (w.ds.block_size, w.cfg.vocab_size, w.ds.markov_rank);
    assert_eq!(cap.block_tokens[0], anchor);
    assert!(cap.block_tokens[1..].iter().all(|&t| t == w.ds.noise_token_id));
    assert_eq!(cap.logits_markov.len(), g * v);
    assert_eq!(cap.markov_embed.len(), g * r);
    let mut prev = anchor;
    let mut e = vec![0.0f32; r];
    for k in 0..g {
        let row = &cap.logits_markov[k * v..(k + 1) * v];
        assert_eq!(drafts[k], trunk::generate::argmax(row), "slot {k} draft is the argmax of its biased logits");
        w.markov_w1.decode_row(prev as usize, &mut e);
        assert_eq!(&cap.markov_embed[k * r..(k + 1) * r], &e[..], "slot {k} embeds the previous pick");
        assert!(conf[k] > 0.0 && conf[k] < 1.0);
        prev = drafts[k];
    }
    // the Markov bias changes the logits (it is not a zero head)
    assert!(cap.logits_markov.iter().zip(&cap.logits_base).any(|(a, b)| a != b));
    // the last commit's taps and main_x; each stage's output, the last one collapsing to `collapsed`
    let (d, hc) = (w.cfg.hidden_size, w.cfg.hc_mult);
    assert_eq!(cap.main_hidden, taps);
    assert_eq!(cap.main_x.len(), tokens.len() * d);
    let mut mx = trunk::cpu::ops::linear::linear(&taps, tokens.len(), &w.main_proj);
    trunk::cpu::ops::norm::rms_norm(&mut mx, d, Some(&w.main_norm), w.cfg.rms_norm_eps as f32);
    assert_eq!(cap.main_x, mx);
    assert_eq!(cap.block_outputs.len(), w.stages.len());
    assert!(cap.block_outputs.iter().all(|o| o.len() == g * hc * d));
    assert_ne!(cap.block_outputs[0], cap.block_outputs[1], "each stage changes the streams");
    let last = cap.block_outputs.last().unwrap();
    for k in 0..g {
        let c = trunk::cpu::ops::hc::hc_head(
            &w.hc_head,
            &last[k * hc * d..(k + 1) * hc * d],
            d,
            w.cfg.hc_eps as f32,
            w.cfg.rms_norm_eps as f32,
        );
        assert_eq!(&cap.collapsed[k * d..(k + 1) * d], &c[..]);
    }
}

#[test]
fn moe_arms_give_identical_proposals_and_captures() {
    let tmp = tempfile::tempdir().unwrap();
    let (w, taps, tokens) = setup(tmp.path());
    let run = |moe: MoeArm, variant: Variant| {
        let mut ds = Dspark::new(w.clone(), variant, 64);
        ds.moe = moe;
        ds.commit(0, &taps).unwrap();
        ds.forward_spec(tokens[39]).unwrap()
    };
    let bits = |x: &[f32]| x.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    for variant in [Variant::Exact, Variant::Fp8] {
        let (d1, c1, k1) = run(MoeArm::Fused, variant);
        let (d2, c2, k2) = run(MoeArm::PerExpert, variant);
        assert_eq!(d1, d2, "{variant}");
        assert_eq!(bits(&c1), bits(&c2), "{variant}: confidences");
        assert_eq!(bits(&k1.collapsed), bits(&k2.collapsed), "{variant}: collapsed hidden");
        assert_eq!(bits(&k1.logits_markov), bits(&k2.logits_markov), "{variant}: logits");
        assert_eq!(bits(&k1.main_x), bits(&k2.main_x), "{variant}: main_x");
        for (s, (a, b)) in k1.block_outputs.iter().zip(&k2.block_outputs).enumerate() {
            assert_eq!(bits(a), bits(b), "{variant}: stage {s} output");
        }
    }
    // the variants differ, so the bitwise comparisons above can fail
    assert_ne!(
        bits(&run(MoeArm::Fused, Variant::Exact).2.collapsed),
        bits(&run(MoeArm::Fused, Variant::Fp8).2.collapsed)
    );
}

#[test]
fn state_moves_into_a_fresh_larger_drafter() {
    let tmp = tempfile::tempdir().unwrap();
    let (w, taps, tokens) = setup(tmp.path());
    let mut ds = Dspark::new(w.clone(), Variant::Exact, 64);
    ds.commit(0, &taps).unwrap();
    let snap = snapshot(&ds.state).unwrap();
    let mut fresh = Dspark::new(w, Variant::Exact, 256);
    restore(&snap, &mut fresh.state).unwrap();
    assert_eq!(fresh.state.positions(), tokens.len());
    assert_eq!(ds.forward_spec(7).unwrap().0, fresh.forward_spec(7).unwrap().0);
}

#[test]
fn bad_commits_are_refused_and_leave_the_state_alone() {
    let tmp = tempfile::tempdir().unwrap();
    let (w, taps, _) = setup(tmp.path());
    let mut ds = Dspark::new(w, Variant::Exact, 32);
    let tw = ds.tap_width();
    ds.commit(0, &taps[..4 * tw]).unwrap();
    let before = snapshot(&ds.state).unwrap();
    let e = ds.commit(4, &taps[..tw - 1]).unwrap_err().to_string();
    assert!(e.contains("whole rows"), "{e}");
    let e = ds.commit(9, &taps[..tw]).unwrap_err().to_string();
    assert!(e.contains("position 9"), "{e}");
    let e = ds.commit(4, &taps[..30 * tw]).unwrap_err().to_string();
    assert!(e.contains("capacity"), "{e}");
    assert_eq!(ds.state.positions(), 4);
    assert!(snapshot(&ds.state).unwrap().differing_classes(&before).is_empty());
}

#[test]
fn a_checkpoint_without_a_drafter_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    write(tmp.path(), false);
    let e = format!("{:#}", DsparkWeights::load(tmp.path()).err().unwrap());
    assert!(e.contains("no DSpark drafter") && e.contains(&tmp.path().display().to_string()), "{e}");
}

#[test]
fn options_are_parsed_strictly() {
    let o = |variant, moe, realization| dspark::Options { variant, moe, realization };
    assert_eq!(parse_options("").unwrap(), o(Variant::Exact, MoeArm::Fused, None));
    assert_eq!(parse_options(r#"{"variant":"fp8"}"#).unwrap(), o(Variant::Fp8, MoeArm::Fused, None));
    assert_eq!(parse_options(r#"{"moe":"per-expert"}"#).unwrap(), o(Variant::Exact, MoeArm::PerExpert, None));
    let gpu = Some(dspark::Realization::Gpu);
    assert_eq!(parse_options(r#"{"realization":"gpu"}"#).unwrap(), o(Variant::Exact, MoeArm::Fused, gpu));
    assert!(parse_options(r#"{"realization":"tpu"}"#).unwrap_err().contains("realization"));
    assert!(parse_options(r#"{"moe":"grouped"}"#).unwrap_err().contains("unknown MoE arm"));
    assert!(parse_options(r#"{"variant":"fp4"}"#).unwrap_err().contains("variant"));
    assert!(parse_options(r#"{"varient":"fp8"}"#).unwrap_err().contains("unknown key `varient`"));
    assert!(parse_options("fp8").unwrap_err().contains("not JSON"));
}

/// A `synth:` address gives the drafter the checkpoint `memra synth` writes
/// for the same preset and seed (generating only `mtp.*`, embed and head).
#[test]
fn synth_address_loads_the_written_drafter() {
    let tmp = tempfile::tempdir().unwrap();
    let (w, taps, _) = setup(tmp.path());
    let s = DsparkWeights::load(Path::new("synth:tiny,seed=11,dspark")).unwrap();
    assert_eq!(s.main_proj.data.to_vec(), w.main_proj.data.to_vec());
    assert_eq!(s.markov_w2.data.to_vec(), w.markov_w2.data.to_vec());
    assert_eq!(s.stages.len(), w.stages.len());
    let (mut a, mut b) = (Dspark::new(w, Variant::Exact, 64), Dspark::new(Arc::new(s), Variant::Exact, 64));
    a.commit(0, &taps).unwrap();
    b.commit(0, &taps).unwrap();
    assert_eq!(a.forward_spec(9).unwrap().0, b.forward_spec(9).unwrap().0);
    let e = match DsparkWeights::load(Path::new("synth:tiny,seed=11")) {
        Ok(_) => panic!("a model without a drafter loaded as one"),
        Err(e) => format!("{e:#}"),
    };
    assert!(e.contains("no DSpark drafter"), "{e}");
}
