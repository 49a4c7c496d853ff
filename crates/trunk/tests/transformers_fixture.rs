//! The CPU oracle (`exact`) against transformers 5.17 on a tiny model that
//! transformers built and saved (scripts/make_reference.py): every position
//! of every prompt, full forward and token by token.

use std::path::Path;

use trunk::cpu::{CpuOracle, Logits, Variant};
use trunk::model::open_model;
use trunk::weights::ExpertArm;

fn read_f32(p: &Path) -> Vec<f32> {
    std::fs::read(p).unwrap().chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect()
}

fn argmax(v: &[f32]) -> usize {
    v.iter().enumerate().fold(0, |b, (i, &x)| if x > v[b] { i } else { b })
}

/// max over positions of max|a-b| / max|b|, and the number of argmax disagreements.
fn compare(ours: &[f32], theirs: &[f32], vocab: usize) -> (f64, usize) {
    let mut worst = 0.0f64;
    let mut disagree = 0;
    for (a, b) in ours.chunks(vocab).zip(theirs.chunks(vocab)) {
        let scale = b.iter().fold(0.0f32, |m, x| m.max(x.abs())) as f64;
        let diff = a.iter().zip(b).fold(0.0f32, |m, (x, y)| m.max((x - y).abs())) as f64;
        worst = worst.max(diff / scale);
        if argmax(a) != argmax(b) {
            disagree += 1;
        }
    }
    (worst, disagree)
}

#[test]
fn cpu_oracle_matches_transformers_every_position() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hf_tiny");
    let model = open_model(&dir, ExpertArm::Native).unwrap();
    let vocab = model.config().vocab_size;
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("prompts.json")).unwrap()).unwrap();
    let oracle = CpuOracle::new(model.weights.clone(), Variant::Exact);
    for (k, prompt) in report["prompts"].as_array().unwrap().iter().enumerate() {
        let ids: Vec<u32> = prompt.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect();
        assert_eq!(ids.len(), 160);
        let mut state = oracle.new_state(ids.len());
        let full = oracle.forward(&mut state, &ids, Logits::All).unwrap();
        let mut state = oracle.new_state(ids.len());
        let mut step = Vec::with_capacity(full.len());
        for &t in &ids {
            step.extend(oracle.forward(&mut state, &[t], Logits::All).unwrap());
        }
        for (ours, file) in [(&full, format!("logits_full_{k}.f32")), (&step, format!("logits_step_{k}.f32"))] {
            let theirs = read_f32(&dir.join(&file));
            assert_eq!(theirs.len(), ours.len(), "{file}");
            let (rel, disagree) = compare(ours, &theirs, vocab);
            eprintln!("prompt {k} {file}: max rel err {rel:.3e}, argmax disagreements {disagree}");
            assert!(rel < 1e-4, "prompt {k} vs {file}: max relative error {rel:e}");
            assert_eq!(disagree, 0, "prompt {k} vs {file}: argmax differs at {disagree} positions");
        }
    }
}
