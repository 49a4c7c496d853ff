//! Checkpoint I/O end to end: every layout of one synthetic seed loads to
//! the same model (bit-identical logits), and damaged or mismatched inputs
//! give errors that name the file and the tensor or field.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use trunk::cpu::{CpuOracle, Logits, Variant};
use trunk::model::open_model;
use trunk::synth::write::{write_model, WriteOptions};
use trunk::synth::{Preset, Synth};
use trunk::weights::{CheckpointLayout, Dsv4Weights, ExpertArm};

fn write(s: &Synth, dir: &Path, layout: CheckpointLayout, shard_bytes: usize) {
    write_model(s, dir, &WriteOptions { layout, shard_bytes }, &mut |_, _| {}).unwrap();
}

fn logits_of(w: Arc<Dsv4Weights>, variant: Variant) -> Vec<f32> {
    let o = CpuOracle::new(w, variant);
    let toks: Vec<u32> = (0..40).map(|i| (i * 37 % 300) as u32 + 2).collect();
    let mut st = o.new_state(40);
    o.forward(&mut st, &toks, Logits::All).unwrap()
}

fn err_of(path: &Path) -> String {
    match open_model(path, ExpertArm::Native) {
        Ok(_) => panic!("{} loaded but should not", path.display()),
        Err(e) => format!("{e:#}"),
    }
}

/// Rewrite a safetensors header with `edit`, keeping the data section.
fn edit_header(file: &Path, edit: impl FnOnce(&mut serde_json::Map<String, serde_json::Value>)) {
    let bytes = std::fs::read(file).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let mut h: serde_json::Value = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    edit(h.as_object_mut().unwrap());
    let mut hb = serde_json::to_vec(&h).unwrap();
    while !hb.len().is_multiple_of(8) {
        hb.push(b' ');
    }
    let mut out = (hb.len() as u64).to_le_bytes().to_vec();
    out.extend(hb);
    out.extend(&bytes[8 + n..]);
    std::fs::write(file, out).unwrap();
}

fn copy_dir(src: &Path, dst: &Path) {
    std::fs::create_dir_all(dst).unwrap();
    for e in std::fs::read_dir(src).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), dst.join(e.file_name())).unwrap();
    }
}

struct Fixture {
    _tmp: tempfile::TempDir,
    root: PathBuf,
}

fn fixture() -> Fixture {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().to_path_buf();
    let s = Synth::new(Preset::Tiny, 11);
    write(&s, &root.join("official"), CheckpointLayout::Official, 1 << 30);
    write(&s, &root.join("hf"), CheckpointLayout::Hf, 600_000); // sharded, with an index
    write(&s, &root.join("official").join("model.gguf"), CheckpointLayout::Gguf, 0);
    Fixture { _tmp: tmp, root }
}

#[test]
fn all_layouts_load_to_the_same_model() {
    let f = fixture();
    let hf_dir = f.root.join("hf");
    assert!(hf_dir.join("model.safetensors.index.json").exists(), "hf checkpoint is sharded");
    let paths = [f.root.join("official"), hf_dir, f.root.join("official/model.gguf")];
    let mut results = Vec::new();
    for p in &paths {
        let m = open_model(p, ExpertArm::Native).unwrap();
        results.push((m.weights.layout, logits_of(m.weights.clone(), Variant::Exact)));
    }
    assert_eq!(results[0].0, CheckpointLayout::Official);
    assert_eq!(results[1].0, CheckpointLayout::Hf);
    assert_eq!(results[2].0, CheckpointLayout::Gguf);
    for (layout, l) in &results[1..] {
        assert!(l == &results[0].1, "{layout:?} logits differ from the official load");
    }
    // the BF16 expert arm computes the same values (FP4 is exact in BF16)
    let bf = open_model(&paths[0], ExpertArm::Bf16).unwrap();
    assert!(logits_of(bf.weights.clone(), Variant::Exact) == results[0].1);
    // and the fp8 variant really differs
    assert!(logits_of(bf.weights.clone(), Variant::Fp8) != results[0].1);
}

#[test]
fn synthesis_is_deterministic_per_seed() {
    use trunk::synth::in_memory;
    let a = in_memory(&Synth::new(Preset::Tiny, 5)).unwrap().sha256();
    let b = in_memory(&Synth::new(Preset::Tiny, 5)).unwrap().sha256();
    let c = in_memory(&Synth::new(Preset::Tiny, 6)).unwrap().sha256();
    assert_eq!(a, b);
    assert_ne!(a, c);
    // and the bytes themselves are pinned: banked trajectories and the
    // reference fixtures were made on them, so a change to the generator
    // (its streams, chunking or rounding) must show here first
    let pinned = in_memory(&Synth::new(Preset::Tiny, 0)).unwrap().sha256();
    assert_eq!(pinned, "fa3489495c0c230d86c7bd623c700923d8cdce9eaafaabb686189761b6e7b7c0");
}

#[test]
fn tiny_activations_are_in_a_realistic_range() {
    use trunk::synth::check::activation_report;
    let m = trunk::model::embedded_model(ExpertArm::Native).unwrap();
    let r = activation_report(&CpuOracle::new(m.weights.clone(), Variant::Exact), 64).unwrap();
    assert!(r.problems().is_empty(), "{:?}\n{}", r.problems(), r.render());
    assert_eq!(r.layers.len(), 4);
}

#[test]
fn truncated_safetensors_is_named() {
    let f = fixture();
    let d = f.root.join("t");
    copy_dir(&f.root.join("official"), &d);
    let file = d.join("model.safetensors");
    let len = std::fs::metadata(&file).unwrap().len();
    let fh = std::fs::OpenOptions::new().write(true).open(&file).unwrap();
    fh.set_len(len / 2).unwrap();
    let e = err_of(&d);
    assert!(e.contains("model.safetensors") && e.contains("truncated"), "{e}");
    fh.set_len(5).unwrap();
    let e = err_of(&d);
    assert!(e.contains("model.safetensors") && e.contains("truncated"), "{e}");
}

#[test]
fn corrupt_header_is_named() {
    let f = fixture();
    let d = f.root.join("c");
    copy_dir(&f.root.join("official"), &d);
    let file = d.join("model.safetensors");
    let mut b = std::fs::read(&file).unwrap();
    b[9] = b'#';
    std::fs::write(&file, b).unwrap();
    let e = err_of(&d);
    assert!(e.contains("model.safetensors") && e.contains("not valid JSON"), "{e}");
}

#[test]
fn unknown_and_wrong_dtypes_name_the_tensor() {
    let f = fixture();
    let d = f.root.join("u");
    copy_dir(&f.root.join("official"), &d);
    let file = d.join("model.safetensors");
    edit_header(&file, |h| {
        h.get_mut("layers.1.attn.wq_a.weight").unwrap()["dtype"] = "F8_E5M2FNUZ".into();
    });
    let e = err_of(&d);
    assert!(e.contains("layers.1.attn.wq_a.weight") && e.contains("unknown dtype"), "{e}");

    let d = f.root.join("w");
    copy_dir(&f.root.join("official"), &d);
    // same byte size, wrong kind: tid2eid as F64
    edit_header(&d.join("model.safetensors"), |h| {
        h.get_mut("layers.0.ffn.gate.tid2eid").unwrap()["dtype"] = "F64".into();
    });
    let e = err_of(&d);
    assert!(e.contains("layers.0.ffn.gate.tid2eid") && e.contains("F64"), "{e}");
}

#[test]
fn missing_tensor_is_named() {
    let f = fixture();
    let d = f.root.join("m");
    copy_dir(&f.root.join("official"), &d);
    edit_header(&d.join("model.safetensors"), |h| {
        h.remove("layers.2.attn.compressor.ape");
    });
    let e = err_of(&d);
    assert!(e.contains("missing tensor `layers.2.attn.compressor.ape`"), "{e}");
}

#[test]
fn config_that_does_not_match_the_weights() {
    let f = fixture();
    let cfg_path = |d: &Path| d.join("config.json");
    let edit = |d: &Path, k: &str, v: serde_json::Value| {
        let mut c: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(cfg_path(d)).unwrap()).unwrap();
        c[k] = v;
        std::fs::write(cfg_path(d), serde_json::to_vec(&c).unwrap()).unwrap();
    };
    // a wider hidden size: the first tensor read names its shape
    let d = f.root.join("k1");
    copy_dir(&f.root.join("hf"), &d);
    edit(&d, "hidden_size", 96.into());
    let e = err_of(&d);
    assert!(e.contains("model.embed_tokens.weight") && e.contains("shape"), "{e}");
    // a schedule of the wrong length
    let d = f.root.join("k2");
    copy_dir(&f.root.join("hf"), &d);
    edit(&d, "layer_types", serde_json::json!(["sliding_attention"]));
    let e = err_of(&d);
    assert!(e.contains("layer_types") && e.contains("num_hidden_layers"), "{e}");
    // a schedule that calls a CSA layer window-only
    let d = f.root.join("k3");
    copy_dir(&f.root.join("hf"), &d);
    edit(
        &d,
        "layer_types",
        serde_json::json!([
            "sliding_attention",
            "sliding_attention",
            "heavily_compressed_attention",
            "compressed_sparse_attention"
        ]),
    );
    let e = err_of(&d);
    assert!(e.contains("layers.1") && e.contains("compressor"), "{e}");
    // heads not divisible by groups
    let d = f.root.join("k4");
    copy_dir(&f.root.join("hf"), &d);
    edit(&d, "o_groups", 3.into());
    let e = err_of(&d);
    assert!(e.contains("o_groups"), "{e}");
    // fewer layers than the checkpoint holds
    let d = f.root.join("k5");
    copy_dir(&f.root.join("official"), &d);
    let mut c: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(cfg_path(&d)).unwrap()).unwrap();
    c["num_hidden_layers"] = 3.into();
    c["compress_ratios"] = serde_json::json!([0, 4, 16]);
    c["layer_types"] =
        serde_json::json!(["sliding_attention", "compressed_sparse_attention", "heavily_compressed_attention"]);
    std::fs::write(cfg_path(&d), serde_json::to_vec(&c).unwrap()).unwrap();
    let e = err_of(&d);
    assert!(e.contains("more layers"), "{e}");
}

#[test]
fn damaged_gguf_is_named() {
    let f = fixture();
    let g = f.root.join("official/model.gguf");
    let d = f.root.join("g");
    std::fs::create_dir_all(&d).unwrap();
    let bad = d.join("trunc.gguf");
    let bytes = std::fs::read(&g).unwrap();
    std::fs::write(&bad, &bytes[..bytes.len() * 2 / 3]).unwrap();
    let e = err_of(&bad);
    assert!(e.contains("trunc.gguf") && e.contains("truncated"), "{e}");
    std::fs::write(&bad, &bytes[..100]).unwrap();
    let e = err_of(&bad);
    assert!(e.contains("trunc.gguf") && e.contains("truncated"), "{e}");
    let mut m = bytes.clone();
    m[0] = b'X';
    std::fs::write(&bad, &m).unwrap();
    let e = err_of(&bad);
    assert!(e.contains("not a GGUF file"), "{e}");
}

/// `synth:` addresses: the plain address is the same model `memra synth`
/// writes; `shared-quantized` shares FP8/FP4 tensors between layers of one
/// attention kind (same bytes) and draws everything else per layer.
#[test]
fn synth_addresses() {
    use trunk::synth::write::MemSource;
    use trunk::weights::tensor::TensorSource;
    let s = Synth::new(Preset::Tiny, 3);
    let full = MemSource::official(&s).unwrap();
    let shared = MemSource::official_sharing_quantized(&s).unwrap();
    assert_eq!(full.names(), shared.names());
    // tiny's layers are window, CSA, HCA, CSA: layer 3 shares layer 1's quantized tensors
    let bytes = |src: &MemSource, n: &str| src.get(n).unwrap().data.to_vec();
    assert_eq!(bytes(&shared, "layers.3.attn.wq_a.weight"), bytes(&shared, "layers.1.attn.wq_a.weight"));
    assert_eq!(bytes(&shared, "layers.3.ffn.experts.5.w2.scale"), bytes(&shared, "layers.1.ffn.experts.5.w2.scale"));
    assert_ne!(bytes(&full, "layers.3.attn.wq_a.weight"), bytes(&full, "layers.1.attn.wq_a.weight"));
    // the first layer of each kind and every unquantized tensor are as drawn in full
    for n in
        ["layers.1.attn.wq_a.weight", "layers.3.ffn.gate.weight", "layers.3.hc_attn_fn", "layers.2.attn.wkv.weight"]
    {
        assert_eq!(bytes(&shared, n), bytes(&full, n), "{n}");
    }
    assert_ne!(bytes(&shared, "layers.3.ffn.gate.weight"), bytes(&shared, "layers.1.ffn.gate.weight"));

    let m = open_model(Path::new("synth:tiny,seed=3"), ExpertArm::Native).unwrap();
    let w = Dsv4Weights::load(&full, &s.config, ExpertArm::Native).unwrap();
    assert_eq!(logits_of(m.weights.clone(), Variant::Exact), logits_of(Arc::new(w), Variant::Exact));
    let sq = open_model(Path::new("synth:tiny,seed=3,shared-quantized"), ExpertArm::Native).unwrap();
    assert_ne!(sq.sha256, m.sha256);
    assert!(logits_of(sq.weights.clone(), Variant::Exact).iter().all(|v| v.is_finite()));
    let ds = open_model(Path::new("synth:tiny,dspark"), ExpertArm::Native).unwrap();
    assert!(ds.config().dspark.is_some());
    // six streams: 48 mixes a site (two of hc_site_rows' stagings, two of hc_site's rounds of 32)
    let h6 = open_model(Path::new("synth:tiny,seed=3,hc=6"), ExpertArm::Native).unwrap();
    assert_eq!(h6.config().hc_mult, 6);
    assert_ne!(h6.sha256, m.sha256);
    let l6 = logits_of(h6.weights.clone(), Variant::Exact);
    assert!(l6.iter().all(|v| v.is_finite()));
    assert_ne!(l6, logits_of(m.weights.clone(), Variant::Exact));
    for (addr, want) in [
        ("synth:tiny,hc=0", "hc `0`"),
        ("synth:tiny,hc=many", "hc `many`"),
        ("synth:tiny,seed=x", "seed `x`"),
        ("synth:tiny,color=red", "unknown part"),
        ("synth:huge", "unknown preset"),
        ("synth:small,layers=43", "fixed depth"),
    ] {
        let e = match open_model(Path::new(addr), ExpertArm::Native) {
            Ok(_) => panic!("{addr} opened"),
            Err(e) => format!("{e:#}"),
        };
        assert!(e.contains(want), "{addr}: {e}");
    }
}

/// Extents and offsets large enough to wrap a byte count are refused by
/// name, not wrapped into a small count that passes the bounds checks and
/// panics later, where the tensor is read.
#[test]
fn sizes_that_overflow_are_refused() {
    let f = fixture();
    let d = f.root.join("x");
    copy_dir(&f.root.join("official"), &d);
    // 2^64 elements: a product that wraps to 0 would match empty offsets
    edit_header(&d.join("model.safetensors"), |h| {
        let t = h.get_mut("layers.0.ffn.gate.tid2eid").unwrap();
        t["shape"] = serde_json::json!([1u64 << 32, 1u64 << 32]);
        t["data_offsets"] = serde_json::json!([0, 0]);
    });
    let e = err_of(&d);
    assert!(e.contains("layers.0.ffn.gate.tid2eid") && e.contains("too large"), "{e}");

    // one F32 tensor `t` of `dims` (GGUF order) at `offset`, 64 bytes of data
    fn gguf(dims: &[u64], offset: u64) -> Vec<u8> {
        let mut b = b"GGUF".to_vec();
        b.extend(3u32.to_le_bytes());
        b.extend(1u64.to_le_bytes());
        b.extend(0u64.to_le_bytes());
        b.extend(1u64.to_le_bytes());
        b.extend(b"t");
        b.extend((dims.len() as u32).to_le_bytes());
        for d in dims {
            b.extend(d.to_le_bytes());
        }
        b.extend(0u32.to_le_bytes());
        b.extend(offset.to_le_bytes());
        b.resize(b.len().div_ceil(32) * 32 + 64, 0);
        b
    }
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("x.gguf");
    let open = |bytes: Vec<u8>| {
        std::fs::write(&p, bytes).unwrap();
        trunk::weights::gguf::GgufFile::open(&p).map(|_| ()).map_err(|e| format!("{e:#}"))
    };
    open(gguf(&[4, 4], 0)).unwrap();
    // the elements overflow
    let e = open(gguf(&[1 << 32, 1 << 32], 0)).unwrap_err();
    assert!(e.contains("x.gguf") && e.contains("`t`") && e.contains("too large"), "{e}");
    // the elements fit and the bytes do not
    let e = open(gguf(&[1 << 61, 2], 0)).unwrap_err();
    assert!(e.contains("`t`") && e.contains("too large"), "{e}");
    // the end of the tensor wraps past the address space
    let e = open(gguf(&[4, 4], u64::MAX - 31)).unwrap_err();
    assert!(e.contains("x.gguf") && e.contains("`t`") && e.contains("truncated"), "{e}");
}

/// Fields whose values no DSV4 checkpoint has, and which would abort an
/// allocation, panic in a clamp, turn every logit into NaN or wrap a token
/// id, are refused by name when the config is read.
#[test]
fn config_fields_out_of_range_are_named() {
    let f = fixture();
    let text = std::fs::read_to_string(f.root.join("hf").join("config.json")).unwrap();
    let with = |k: &str, v: serde_json::Value| {
        let mut c: serde_json::Value = serde_json::from_str(&text).unwrap();
        c[k] = v;
        trunk::config::Dsv4Config::from_hf_json(&c.to_string()).map(|_| ()).map_err(|e| format!("{e:#}"))
    };
    with("rope_theta", 10000.0.into()).unwrap();
    for (k, v) in [
        ("sliding_window", serde_json::json!(1u64 << 40)),
        ("swiglu_limit", serde_json::json!(-1.0)),
        ("rope_theta", serde_json::json!(0.0)),
        ("eos_token_id", serde_json::json!((1u64 << 32) + 1)),
        ("eos_token_id", serde_json::json!([])),
        ("bos_token_id", serde_json::json!(["x"])),
    ] {
        let e = with(k, v.clone()).expect_err(&format!("{k} = {v} was accepted"));
        assert!(e.contains(k), "{k} = {v}: {e}");
    }
}
