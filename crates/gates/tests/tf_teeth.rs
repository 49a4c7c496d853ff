//! The teacher-forced gate passes a faithful realization and fails a broken
//! one (the broken realization here is the CPU oracle with one layer's
//! shared expert zeroed, the same fault the GPU seam injects).

use std::sync::Arc;

use gates::band::{drift_coeff, Realization};
use gates::tf::{tf_gate, CpuRealization};
use trunk::bank::Bank;
use trunk::cpu::{CpuOracle, Variant};
use trunk::generate::random_prompt;
use trunk::model::embedded_model;
use trunk::weights::matrix::{MatFormat, Matrix};
use trunk::weights::tensor::Bytes;
use trunk::weights::ExpertArm;

fn c_sum(v: Variant) -> f64 {
    drift_coeff(Realization::Gpu, v, 4) + drift_coeff(Realization::Cpu, v, 4)
}

#[test]
fn gate_passes_the_oracle_and_fails_a_dropped_shared_expert() {
    let m = embedded_model(ExpertArm::Native).unwrap();
    let oracle = CpuOracle::new(m.weights.clone(), Variant::Exact);
    let prompt = random_prompt(24, 3, 2, 320);
    let bank = Bank::record(&oracle, &prompt, 48, ("tiny", "embedded", &m.sha256), |_| {}).unwrap();

    let rep = tf_gate(&CpuRealization(&oracle), &bank, c_sum(Variant::Exact)).unwrap();
    assert!(rep.pass && rep.agree == 48 && rep.determinism, "{rep:?}");
    assert_eq!(rep.max_rel_drift_top1, 0.0, "the oracle reproduces its own bank exactly");

    let mut broken = (*m.weights).clone();
    let w2 = &broken.layers[2].ffn.shared.w2;
    let zero = Matrix {
        rows: w2.rows,
        cols: w2.cols,
        format: MatFormat::F32,
        data: Bytes::from_vec(vec![0u8; w2.rows * w2.cols * 4]),
    };
    broken.layers[2].ffn.shared.w2 = zero;
    let faulty = CpuOracle::new(Arc::new(broken), Variant::Exact);
    let rep = tf_gate(&CpuRealization(&faulty), &bank, c_sum(Variant::Exact)).unwrap();
    assert!(!rep.pass, "a dropped shared expert must fail the gate: {rep:?}");
    assert!(rep.out_of_band > 0);
}

/// A bank whose ids the model's vocabulary cannot hold (edited, or made
/// from another model) is refused by field, before any logits are read.
#[test]
fn gate_refuses_a_bank_outside_the_vocabulary() {
    let m = embedded_model(ExpertArm::Native).unwrap();
    let oracle = CpuOracle::new(m.weights.clone(), Variant::Exact);
    let prompt = random_prompt(8, 3, 2, 320);
    let mut bank = Bank::record(&oracle, &prompt, 6, ("tiny", "embedded", &m.sha256), |_| {}).unwrap();
    // the last token is the one no forward reads: only the check sees it
    let vocab = m.config().vocab_size as u32;
    bank.tokens[5] = vocab;
    bank.top8_ids[5 * 8] = vocab;
    bank.check().unwrap();
    let e = tf_gate(&CpuRealization(&oracle), &bank, c_sum(Variant::Exact)).unwrap_err();
    assert!(format!("{e:#}").contains("tokens[5]"), "{e:#}");
}

#[test]
fn host_cache_gate_passes_on_the_oracle_and_catches_a_flipped_bit() {
    use gates::host_cache::{dsv4_identity, host_cache_gate, CpuEngine, FlipBit};
    let m = embedded_model(ExpertArm::Native).unwrap();
    for variant in [Variant::Exact, Variant::Fp8] {
        let oracle = CpuOracle::new(m.weights.clone(), variant);
        let e = CpuEngine { oracle: &oracle, identity: dsv4_identity(m.config(), &m.sha256, variant) };
        let ids = random_prompt(80, 9, 2, 320);
        let dir = tempfile::tempdir().unwrap();
        let rep = host_cache_gate(&e, &ids, dir.path(), None).unwrap();
        assert!(rep.pass, "{rep:?}");
        assert!(rep.snapshot_bytes > 0 && rep.park_bytes as usize > rep.snapshot_bytes);
        // one flipped bit in the compressed entries of layer 1 must be caught
        let class = oracle.state_layout.layers[1].comp_entries.unwrap();
        let rep = host_cache_gate(&e, &ids, dir.path(), Some(FlipBit { class, byte: 5 })).unwrap();
        assert!(!rep.pass && !rep.restored_classes_identical, "{rep:?}");
        assert!(rep.differing_classes.iter().any(|c| c.contains("layer01.comp.entries")), "{rep:?}");
    }
}
