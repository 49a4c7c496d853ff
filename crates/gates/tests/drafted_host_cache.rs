//! The host-cache gate with a drafter riding along: the DSpark plugin's
//! rings are parked and restored with the trunk's classes, and a flipped bit
//! in a drafter ring is caught.

use std::path::PathBuf;
use std::process::Command;

use gates::host_cache::{dsv4_identity, host_cache_gate, DraftedEngine, FlipBit};
use kvstate::StateStore;
use trunk::cpu::{CpuOracle, Variant};
use trunk::drafter::DrafterPlugin;
use trunk::generate::random_prompt;
use trunk::synth::write::{write_model, WriteOptions};
use trunk::synth::{Preset, Synth};
use trunk::weights::{CheckpointLayout, ExpertArm};

/// Build the DSpark plugin with this test's profile; its path.
fn libdspark() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().unwrap().parent().unwrap().to_path_buf();
    let mut cmd = Command::new(env!("CARGO"));
    cmd.args(["build", "-q", "-p", "dspark"]);
    if profile_dir.ends_with("release") {
        cmd.arg("--release");
    } else {
        // the test profile (optimized): the same build the tests link against
        cmd.args(["--profile", "test"]);
    }
    assert!(cmd.status().unwrap().success(), "building the DSpark plugin failed");
    profile_dir.join(format!("{}dspark{}", std::env::consts::DLL_PREFIX, std::env::consts::DLL_SUFFIX))
}

#[test]
fn drafter_rings_are_parked_restored_and_checked() {
    let lib = libdspark();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("tiny");
    let s = Synth::new(Preset::Tiny, 3).with_dspark();
    write_model(&s, &dir, &WriteOptions { layout: CheckpointLayout::Official, shard_bytes: 1 << 30 }, &mut |_, _| {})
        .unwrap();
    let m = trunk::model::open_model(&dir, ExpertArm::Native).unwrap();
    let oracle = CpuOracle::new(m.weights.clone(), Variant::Exact);
    let e = DraftedEngine {
        target: &oracle,
        plugin: DrafterPlugin::load(&lib).unwrap(),
        model_dir: dir.clone(),
        options_json: None,
        device: None,
        identity: dsv4_identity(m.config(), &m.sha256, Variant::Exact),
        label: "cpu/exact".into(),
    };
    let ids = random_prompt(80, 5, 2, m.config().vocab_size as u32);
    let rep = host_cache_gate(&e, &ids, tmp.path(), None).unwrap();
    assert!(rep.pass, "{rep:?}");
    // the drafter's classes are part of the state the gate compares
    let st = gates::host_cache::CacheEngine::alloc(&e, 8, 1).unwrap();
    let names: Vec<String> = st.layout().classes.iter().map(|c| c.name.clone()).collect();
    let first = names.iter().position(|n| n.starts_with("drafter/")).expect("drafter classes");
    assert!(names[..first].iter().all(|n| n.starts_with("trunk/")));
    let rep = host_cache_gate(&e, &ids, tmp.path(), Some(FlipBit { class: first, byte: 9 })).unwrap();
    assert!(!rep.pass && !rep.restored_classes_identical, "{rep:?}");
    assert_eq!(rep.differing_classes, [names[first].clone()], "{rep:?}");
}
