//! Speculative greedy decoding gives exactly the tokens of plain greedy
//! decoding, for every drafter plugin and both MoE arms (CPU oracle); and
//! drafters load at run time, with clear errors for libraries that are not
//! drafters.

use std::path::PathBuf;
use std::process::Command;

fn memra(args: &[&str]) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_memra")).args(args).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Build the drafter plugins with the test's own profile and return their directory.
fn plugins() -> PathBuf {
    let exe = PathBuf::from(env!("CARGO_BIN_EXE_memra"));
    let dir = exe.parent().unwrap().to_path_buf();
    let release = dir.ends_with("release");
    let mut cmd = Command::new(env!("CARGO"));
    cmd.args(["build", "-q", "-p", "drafter-ngram", "-p", "drafter-replay", "-p", "dspark"]);
    if release {
        cmd.arg("--release");
    } else {
        // the test profile (optimized): the same build the tests link against
        cmd.args(["--profile", "test"]);
    }
    let st = cmd.status().unwrap();
    assert!(st.success(), "building the drafter plugins failed");
    dir
}

/// The replay drafter's library, built.
fn replay_drafter() -> PathBuf {
    let dll = |name: &str| format!("{}{name}{}", std::env::consts::DLL_PREFIX, std::env::consts::DLL_SUFFIX);
    plugins().join(dll("replay_drafter"))
}

#[test]
fn speculative_equals_greedy_for_every_drafter_and_moe_arm() {
    speculative_equals_greedy("tiny");
}

/// The same on the `small` preset (heavy: minutes on two cores; run with
/// `cargo test --workspace -- --include-ignored`).
#[test]
#[ignore = "heavy: the small preset"]
fn speculative_equals_greedy_on_small() {
    speculative_equals_greedy("small");
}

fn speculative_equals_greedy(preset: &str) {
    let dir = plugins();
    let tmp = tempfile::tempdir().unwrap();
    let model = tmp.path().join(preset);
    let out = Command::new(env!("CARGO_BIN_EXE_memra"))
        .args(["synth", "--preset", preset, "--seed", "4", "--out", model.to_str().unwrap(), "--dspark"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let m = model.to_str().unwrap();
    let bank = tmp.path().join("bank.json");
    let o = Command::new(env!("CARGO_BIN_EXE_memra"))
        .args(["bank", "--model", m, "--prompt-len", "24", "--n", "96", "--out", bank.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(o.status.success());
    let b: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&bank).unwrap()).unwrap();
    let prompt = tmp.path().join("prompt.json");
    std::fs::write(&prompt, serde_json::to_vec(&b["prompt"]).unwrap()).unwrap();
    let p = prompt.to_str().unwrap();
    let base = ["generate", "--model", m, "--tokens", p, "--max-tokens", "96", "--no-stop", "--json"];
    let plain = memra(&base);
    assert_eq!(plain["tokens"], b["tokens"], "plain greedy equals the bank");
    assert_eq!(plain["prompt"], b["prompt"]);
    let opts = format!("@{}", bank.display());
    let libs = [
        ("ngram", dir.join("libngram_drafter.so"), None),
        ("replay", dir.join("libreplay_drafter.so"), Some(opts.as_str())),
        ("dspark", dir.join("libdspark.so"), None),
    ];
    for (name, lib, options) in &libs {
        for moe in ["fused", "per-expert"] {
            for schedule in ["confidence", "fixed"] {
                let mut args: Vec<&str> = base.to_vec();
                args.extend(["--drafter", lib.to_str().unwrap(), "--moe", moe, "--schedule", schedule]);
                let dspark_opts = format!("{{\"moe\":\"{moe}\"}}");
                match (options, *name) {
                    (Some(o), _) => args.extend(["--drafter-options", o]),
                    (None, "dspark") => args.extend(["--drafter-options", dspark_opts.as_str()]),
                    _ => {}
                }
                let r = memra(&args);
                assert_eq!(r["tokens"], plain["tokens"], "{name} {moe} {schedule}: speculative != greedy");
                assert!(r["mean_accepted"].as_f64().unwrap() >= 1.0);
                let by = r["acceptance_by_position"].as_array().unwrap();
                assert_eq!(by.len(), 5);
                if *name == "replay" && schedule == "fixed" {
                    assert_eq!(r["mean_accepted"].as_f64().unwrap(), 6.0, "replay accepts every draft");
                }
            }
        }
    }
}

#[test]
fn a_library_that_is_not_a_drafter_is_refused_clearly() {
    let libm = ["/lib/x86_64-linux-gnu/libm.so.6", "/usr/lib/x86_64-linux-gnu/libm.so.6", "/lib64/libm.so.6"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists());
    let Some(libm) = libm else { return };
    let out = Command::new(env!("CARGO_BIN_EXE_memra")).args(["generate", "--drafter", libm]).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not a memra drafter") && err.contains("memra_drafter_v1"), "{err}");
    let out =
        Command::new(env!("CARGO_BIN_EXE_memra")).args(["generate", "--drafter", "/nonexistent.so"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("/nonexistent.so"), "{err}");
}

/// `--baseline` decodes plainly on the same engine first; `@baseline` hands
/// that trajectory to the replay drafter (full acceptance), and asking for it
/// without `--baseline` is an error.
#[test]
fn baseline_run_feeds_the_replay_drafter() {
    let replay = replay_drafter();
    let r = replay.to_str().unwrap();
    let base = ["generate", "--model", "synth:tiny,seed=2", "--max-tokens", "40", "--no-stop", "--json"];
    let v = memra(
        &[&base[..], &["--drafter", r, "--drafter-options", "@baseline", "--baseline", "--schedule", "fixed"]].concat(),
    );
    assert_eq!(v["equal_to_baseline"], true);
    assert_eq!(v["tokens"].as_array().unwrap().len(), 40);
    assert!(v["baseline_tokens_per_s"].as_f64().unwrap() > 0.0);
    // every proposal survives (the last step is cut at --max-tokens)
    assert!(v["acceptance_by_position"].as_array().unwrap().iter().all(|x| x.as_f64() == Some(1.0)), "{v}");
    assert!(v["mean_accepted"].as_f64().unwrap() > 5.5, "{v}");
    let plain = memra(&base);
    assert_eq!(plain["tokens"], v["tokens"]);
    let out = Command::new(env!("CARGO_BIN_EXE_memra"))
        .args([&base[..], &["--drafter", r, "--drafter-options", "@baseline"]].concat())
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("needs --baseline"));
}

/// The drafter gate: two instances with equal semantics agree proposal by
/// proposal (PASS); a candidate that computes something else (the fp8
/// variant against the exact reference) is caught (FAIL).
#[test]
fn drafter_gate_passes_twins_and_catches_a_different_realization() {
    let dir = plugins();
    let lib = dir.join(format!("{}dspark{}", std::env::consts::DLL_PREFIX, std::env::consts::DLL_SUFFIX));
    let tmp = tempfile::tempdir().unwrap();
    let model = tmp.path().join("tiny");
    let out = Command::new(env!("CARGO_BIN_EXE_memra"))
        .args(["synth", "--preset", "tiny", "--seed", "4", "--out", model.to_str().unwrap(), "--dspark"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let gate = |candidate: &str| {
        let rep = tmp.path().join("rep.json");
        let o = Command::new(env!("CARGO_BIN_EXE_memra"))
            .args(["gate", "drafters", model.to_str().unwrap(), "--drafter", lib.to_str().unwrap()])
            .args(["--backend", "cpu", "--steps", "6", "--candidate", candidate, "--out", rep.to_str().unwrap()])
            .output()
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&rep).unwrap()).unwrap();
        (o.status.success(), v)
    };
    let (ok, v) = gate(r#"{"realization":"cpu","moe":"per-expert"}"#);
    assert!(ok && v["pass"] == true, "{v}");
    assert_eq!(v["ids_equal"], v["slots"]);
    assert_eq!(v["max_conf_abs_diff"], 0.0);
    let (ok, v) = gate(r#"{"realization":"cpu","variant":"fp8"}"#);
    assert!(!ok && v["pass"] == false, "{v}");
    assert!(v["max_conf_abs_diff"].as_f64().unwrap() > 1e-6, "{v}");
}

/// A drafter's tapped layers: the engine hands them over with every commit
/// (the replay drafter checks their count and accepts every draft, so the
/// tokens stay greedy's), and refuses, naming the plugin, a drafter that
/// asks for more layers than its rows hold, whose commits would read past them.
#[test]
fn tapped_layers_are_shipped_and_bounded() {
    let replay = replay_drafter();
    let r = replay.to_str().unwrap();
    let base = ["generate", "--model", "synth:tiny,seed=2", "--max-tokens", "24", "--no-stop", "--json"];
    let plain = memra(&base);
    let prompt: Vec<u64> = plain["prompt"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect();
    let traj: Vec<u64> =
        prompt.iter().copied().chain(plain["tokens"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap())).collect();
    let opts = |taps: &[u32]| serde_json::json!({ "trajectory": traj, "tap_layers": taps }).to_string();
    let o = opts(&[0, 3]);
    let v = memra(&[&base[..], &["--drafter", r, "--drafter-options", &o, "--schedule", "fixed"]].concat());
    assert_eq!(v["tokens"], plain["tokens"]);
    assert!(v["mean_accepted"].as_f64().unwrap() > 5.0, "{v}");
    let o = opts(&[0; 17]);
    let out = Command::new(env!("CARGO_BIN_EXE_memra"))
        .args([&base[..], &["--drafter", r, "--drafter-options", &o]].concat())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("replay") && err.contains("taps 17 layers"), "{err}");
}
