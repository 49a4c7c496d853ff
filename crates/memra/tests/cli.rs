//! The command line as users and other tools call it.

use std::process::Command;

fn memra(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_memra")).args(args).output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn generate_runs_the_embedded_model() {
    let (ok, out, err) = memra(&["generate", "--json", "--max-tokens", "12", "--prompt", "Hello"]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    let toks = v["tokens"].as_array().unwrap();
    assert!(!toks.is_empty() && toks.len() <= 12);
    assert!(v["tokens_per_s"].as_f64().unwrap() > 0.0);
    assert!(v["text"].is_string());
    // deterministic
    let (_, out2, _) = memra(&["generate", "--json", "--max-tokens", "12", "--prompt", "Hello"]);
    let v2: serde_json::Value = serde_json::from_str(out2.trim()).unwrap();
    assert_eq!(v["tokens"], v2["tokens"]);
}

#[test]
fn bank_and_logits_agree() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let model = d.join("tiny");
    let (ok, _, err) = memra(&["synth", "--preset", "tiny", "--seed", "2", "--out", model.to_str().unwrap()]);
    assert!(ok, "{err}");
    let bank = d.join("bank.json");
    let (ok, _, err) = memra(&[
        "bank",
        "--model",
        model.to_str().unwrap(),
        "--prompt-len",
        "24",
        "--n",
        "40",
        "--out",
        bank.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    let b: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&bank).unwrap()).unwrap();
    let prompt: Vec<u64> = b["prompt"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect();
    let tokens: Vec<u64> = b["tokens"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect();
    let ids = b["top8_ids"].as_array().unwrap();
    let lg: Vec<f64> = b["top8_logits"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect();
    assert_eq!((prompt.len(), tokens.len(), ids.len(), lg.len()), (24, 40, 320, 320));
    assert_eq!(b["variant"], "exact");
    assert_eq!(b["source_sha256"].as_str().unwrap().len(), 64);
    for i in 0..40 {
        assert_eq!(ids[i * 8].as_u64().unwrap(), tokens[i]);
        assert!(lg[i * 8..i * 8 + 8].windows(2).all(|w| w[0] >= w[1]));
    }
    // teacher-forced logits of prompt ++ tokens reproduce the banked top-8 bit for bit
    let seq: Vec<u64> = prompt.iter().chain(&tokens).copied().collect();
    let toks = d.join("seq.json");
    std::fs::write(&toks, serde_json::to_vec(&serde_json::json!({ "tokens": seq })).unwrap()).unwrap();
    let out = d.join("logits.f32");
    let (ok, _, err) = memra(&[
        "logits",
        "--model",
        model.to_str().unwrap(),
        "--tokens",
        toks.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    let side: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("logits.f32.json")).unwrap()).unwrap();
    assert_eq!(side["shape"], serde_json::json!([64, 320]));
    assert_eq!(side["weights_sha256"], b["source_sha256"]);
    let raw = std::fs::read(&out).unwrap();
    let l: Vec<f32> = raw.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
    for i in 0..40 {
        let row = &l[(23 + i) * 320..(24 + i) * 320];
        for k in 0..8 {
            let id = ids[i * 8 + k].as_u64().unwrap() as usize;
            assert_eq!(row[id], lg[i * 8 + k] as f32, "position {i} rank {k}");
        }
    }
}

#[test]
fn bad_input_gives_clear_errors() {
    let (ok, _, err) = memra(&["generate", "--model", "/nonexistent/dir"]);
    assert!(!ok && err.contains("/nonexistent/dir"), "{err}");
    let (ok, _, err) = memra(&["generate", "--bogus"]);
    assert!(!ok && err.contains("--bogus"), "{err}");
    let (ok, _, err) = memra(&["bank", "--n", "3", "--out", "/tmp/x.json"]);
    assert!(!ok && err.contains("--prompt-len"), "{err}");
    let (ok, _, err) = memra(&["generate", "--variant", "fp7"]);
    assert!(!ok && err.contains("fp7"), "{err}");
    let dir = tempfile::tempdir().unwrap();
    let t = dir.path().join("t.json");
    std::fs::write(&t, "[1, 2, -3]").unwrap();
    let (ok, _, err) = memra(&["generate", "--tokens", t.to_str().unwrap()]);
    assert!(!ok && err.contains("tokens[2]"), "{err}");
    std::fs::write(&t, "[1, 2, 99999]").unwrap();
    let (ok, _, err) = memra(&["generate", "--tokens", t.to_str().unwrap()]);
    assert!(!ok && err.contains("99999"), "{err}");
}

#[test]
fn every_command_has_help() {
    for c in ["generate", "synth", "bank", "logits", "kernels"] {
        let (ok, out, _) = memra(&[c, "--help"]);
        assert!(ok && out.contains(&format!("memra {c}")), "{c}: {out}");
    }
}

#[test]
fn kernels_are_compiled_ahead_and_kept() {
    // refusals that need no NVRTC
    let (ok, _, err) = memra(&["kernels", "--arch", "8.0"]);
    assert!(!ok && err.contains("8.0") && err.contains("9.0"), "{err}");
    let (ok, _, err) = memra(&["kernels", "--arch", "sm_90"]);
    assert!(!ok && err.contains("--arch sm_90"), "{err}");
    if !trunk::gpu::nvrtc::library_present("nvrtc") {
        assert!(std::env::var("MEMRA_REQUIRE_NVRTC").as_deref() != Ok("1"), "NVRTC is required and missing");
        eprintln!("SKIPPED: libnvrtc not found; `memra kernels` not run");
        return;
    }
    // the image kept where the GPU forward looks (the default cache
    // directory, shared with kernels_compile: whichever runs first compiles)
    let (ok, out, err) = memra(&["kernels"]);
    assert!(ok, "{err}");
    let path = out.trim().rsplit(": ").next().unwrap();
    let kept = std::fs::read(path).unwrap();
    use sha2::Digest;
    assert_eq!(kept[..32], sha2::Sha256::digest(&kept[32..])[..], "{path} is not an image after its SHA-256");
    assert_eq!(&kept[32..36], b"\x7fELF");
    assert_eq!(Some(std::path::Path::new(path)), trunk::gpu::nvrtc::kept_cubin_path(9, 0).unwrap().as_deref());
    // and read back, not compiled, on the next call
    let (ok, out, err) = memra(&["kernels", "--arch", "9.0"]);
    assert!(ok && out.contains("already kept") && out.contains(path), "{out}{err}");
}

/// A command that runs the model on the GPU checks for one, and reads its
/// options, before it opens the model: the roofline's default weights take
/// minutes to generate. The model here does not exist, so whichever check
/// comes first names itself.
#[test]
fn gpu_commands_check_the_gpu_before_the_model() {
    let missing = "/nonexistent/memra-model";
    let expected = match trunk::gpu::unavailable_reason() {
        Some(why) => format!("GPU backend unavailable: {why}"),
        None => missing.to_string(),
    };
    for args in [
        &["bench", "roofline", "--model", missing][..],
        &["bench", "park", missing],
        &["gate", "chunks", missing],
        &["gate", "tf", missing, "bank.json", "out"],
        &["gate", "host-cache", missing, "tokens.json"],
        &["generate", "--backend", "gpu", "--model", missing],
        &["logits", "--backend", "gpu", "--model", missing, "--tokens", "t.json", "--out", "o"],
    ] {
        let (ok, _, err) = memra(args);
        assert!(!ok && err.contains(&expected), "{args:?}: {err}");
    }
    // options are read before both
    let (ok, _, err) = memra(&["bench", "roofline", "--model", missing, "--contexts", "1k"]);
    assert!(!ok && err.contains("--contexts: `1k`"), "{err}");
    let (ok, _, err) = memra(&["gate", "host-cache", missing, "tokens.json", "--backend", "tpu"]);
    assert!(!ok && err.contains("unknown --backend `tpu`"), "{err}");
    let (ok, _, err) = memra(&["gate", "bogus", missing]);
    assert!(!ok && err.contains("unknown gate `bogus`"), "{err}");
    // the CPU backend needs no GPU: it gets as far as the model
    let (ok, _, err) = memra(&["generate", "--backend", "cpu", "--model", missing]);
    assert!(!ok && err.contains(missing), "{err}");
}

/// Counts the model cannot hold are refused by name before any work: the
/// positions a generation needs against `max_position_embeddings` (the
/// embedded model has 4096), counts that must be positive, and a synthetic
/// model with no layers or more hyper-connection streams than the kernels take.
#[test]
fn counts_out_of_range_are_refused_by_name() {
    for (args, expect) in [
        (&["generate", "--max-tokens", "5000"][..], "--max-tokens (5000)"),
        (&["generate", "--max-tokens", "18446744073709551615"], "max_position_embeddings"),
        (&["bank", "--prompt-len", "10", "--n", "4087", "--out", "/nonexistent/b.json"], "--n (4087)"),
        (&["bench", "roofline", "--steps", "0"], "--steps must be positive"),
        (&["bank", "--prompt-len", "4", "--n", "0", "--out", "/nonexistent/b.json"], "--n must be positive"),
        (&["bench", "park", "/nonexistent/m", "--reps", "0"], "--reps must be positive"),
        (&["synth", "--preset", "flash-shape", "--layers", "0", "--out", "/nonexistent/s"], "must be positive"),
        (&["generate", "--model", "synth:tiny,hc=9"], "hc `9` (1 to 8 streams)"),
    ] {
        let (ok, _, err) = memra(args);
        assert!(!ok && err.contains(expect), "{args:?}: {err}");
    }
    // an id the vocabulary (320) does not hold, named with its file and index
    let dir = tempfile::tempdir().unwrap();
    let t = dir.path().join("t.json");
    std::fs::write(&t, "[1, 2, 320]").unwrap();
    let (ok, _, err) = memra(&["generate", "--tokens", t.to_str().unwrap()]);
    assert!(!ok && err.contains("t.json: tokens[2] = 320 is outside the vocabulary (320)"), "{err}");
    // the edge: 19 prompt tokens and 4077 new ones are the 4096 positions
    let (ok, _, err) = memra(&["bank", "--prompt-len", "19", "--n", "4078", "--out", "/nonexistent/b.json"]);
    assert!(!ok && err.contains("--n (4078)"), "{err}");
}

/// A checkpoint without its tokenizer.json still runs (ids in, ids out), and
/// says that the byte-level stand-in's text means nothing for a real model.
#[test]
fn a_missing_tokenizer_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("tiny");
    let (ok, _, err) = memra(&["synth", "--preset", "tiny", "--seed", "2", "--out", model.to_str().unwrap()]);
    assert!(ok, "{err}");
    let run = || memra(&["generate", "--model", model.to_str().unwrap(), "--max-tokens", "2"]);
    let (ok, _, err) = run();
    assert!(ok && !err.contains("warning"), "{err}");
    std::fs::remove_file(model.join("tokenizer.json")).unwrap();
    let (ok, _, err) = run();
    assert!(ok && err.contains("warning: no ") && err.contains("tokenizer.json"), "{err}");
}
