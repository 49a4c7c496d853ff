//! Opening a model: a checkpoint directory (config.json + safetensors, HF or
//! official names), a `.gguf` file, or the embedded synthetic default.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use sha2::{Digest, Sha256};

use crate::config::Dsv4Config;
use crate::gpu::MAX_HC_STREAMS;
use crate::synth::{in_memory, Preset, Synth};
use crate::tokenizer::Tokenizer;
use crate::weights::gguf::GgufFile;
use crate::weights::gguf_meta::config_from_gguf;
use crate::weights::safetensors::SafetensorsDir;
use crate::weights::{Dsv4Weights, ExpertArm};

/// The seed of the embedded default model.
pub const EMBEDDED_SEED: u64 = 0;

/// A loaded model and where it came from.
pub struct LoadedModel {
    pub weights: Arc<Dsv4Weights>,
    pub tokenizer: Tokenizer,
    /// A name for reports: the path, or `embedded:tiny`.
    pub label: String,
    /// sha256 identifying the weights (of the files, or of the synthetic tensors).
    pub sha256: String,
}

impl LoadedModel {
    pub fn config(&self) -> &Dsv4Config {
        &self.weights.config
    }
}

/// sha256 over the weight files in name order (each file's name and bytes).
pub fn files_sha256(files: &[PathBuf]) -> Result<String> {
    let mut sorted = files.to_vec();
    sorted.sort();
    let mut h = Sha256::new();
    for f in &sorted {
        h.update(f.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default().as_bytes());
        let file = std::fs::File::open(f).with_context(|| format!("opening {}", f.display()))?;
        // SAFETY: read-only map used only for hashing.
        let map = unsafe { memmap2::Mmap::map(&file) }?;
        h.update(&map[..]);
    }
    Ok(h.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

/// Open `path` (directory, .gguf, or a `synth:` address) with the given
/// expert arm.
pub fn open_model(path: &Path, arm: ExpertArm) -> Result<LoadedModel> {
    if let Some(addr) = path.to_str().and_then(|p| p.strip_prefix("synth:")) {
        return synthetic_model(addr, arm);
    }
    if path.is_file() && path.extension().is_some_and(|e| e == "gguf") {
        let g = GgufFile::open(path)?;
        let cfg = config_from_gguf(&g.metadata, &path.display().to_string())?;
        let weights = Dsv4Weights::load(&g, &cfg, arm)?;
        let tok_path = path.parent().unwrap_or(Path::new(".")).join("tokenizer.json");
        let tokenizer = Tokenizer::load_or_bytes(&tok_path, &cfg)?;
        let sha256 = files_sha256(&[path.to_path_buf()])?;
        return Ok(LoadedModel { weights: Arc::new(weights), tokenizer, label: path.display().to_string(), sha256 });
    }
    if !path.is_dir() {
        bail!("{}: not a model directory or .gguf file", path.display());
    }
    let cfg = Dsv4Config::from_hf_file(&path.join("config.json"))?;
    let st = SafetensorsDir::open(path)?;
    let weights = Dsv4Weights::load(&st, &cfg, arm)?;
    let tokenizer = Tokenizer::load_or_bytes(&path.join("tokenizer.json"), &cfg)?;
    let sha256 = files_sha256(&st.files())?;
    Ok(LoadedModel { weights: Arc::new(weights), tokenizer, label: path.display().to_string(), sha256 })
}

/// A synthetic model generated in memory from an address
/// `PRESET[,layers=N][,seed=S][,hc=H][,dspark][,shared-quantized]` (what
/// follows `synth:`), e.g. `synth:flash-shape,layers=43,shared-quantized`:
/// the weights `memra synth` would write for the same preset, seed and
/// flags, without a checkpoint on disk. `hc=H` gives the preset H
/// hyper-connection streams instead of its 4 (the kernels' paths for wider
/// mixes: more than 24 mixes a site from 5 streams). `shared-quantized`
/// draws each FP8/FP4 tensor once per attention kind and shares it between
/// layers (`MemSource::official_sharing_quantized`), for shapes too deep
/// to generate in full. The identity hash covers the address and the
/// config (the generator is deterministic), not the tensors' bytes.
pub fn synthetic_model(addr: &str, arm: ExpertArm) -> Result<LoadedModel> {
    let (s, shared) = parse_synth_address(addr)?;
    let src = if shared { crate::synth::write::MemSource::official_sharing_quantized(&s)? } else { in_memory(&s)? };
    let weights = Dsv4Weights::load(&src, &s.config, arm)?;
    let mut h = Sha256::new();
    h.update(format!("synth:{addr}").as_bytes());
    h.update(s.config.fingerprint().as_bytes());
    Ok(LoadedModel {
        tokenizer: Tokenizer::bytes(&s.config),
        label: format!("synth:{addr}"),
        sha256: h.finalize().iter().map(|b| format!("{b:02x}")).collect(),
        weights: Arc::new(weights),
    })
}

/// The synthetic model an address (what follows `synth:`) names, and
/// whether it shares quantized tensors between layers.
pub fn parse_synth_address(addr: &str) -> Result<(Synth, bool)> {
    let mut parts = addr.split(',');
    let preset = parts.next().unwrap_or_default();
    let (mut layers, mut seed, mut hc, mut dspark, mut shared) = (None, 0u64, None, false, false);
    for p in parts {
        match p.split_once('=') {
            Some(("layers", v)) => layers = Some(v.parse().with_context(|| format!("synth:{addr}: layers `{v}`"))?),
            Some(("seed", v)) => seed = v.parse().with_context(|| format!("synth:{addr}: seed `{v}`"))?,
            Some(("hc", v)) => {
                let h = v.parse::<usize>().ok().filter(|h| (1..=MAX_HC_STREAMS).contains(h));
                hc = Some(h.with_context(|| format!("synth:{addr}: hc `{v}` (1 to {MAX_HC_STREAMS} streams)"))?);
            }
            None if p == "dspark" => dspark = true,
            None if p == "shared-quantized" => shared = true,
            _ => bail!("synth:{addr}: unknown part `{p}` (layers=N, seed=S, hc=H, dspark, shared-quantized)"),
        }
    }
    let mut s = Synth::new(Preset::parse(preset, layers)?, seed);
    if let Some(h) = hc {
        s.config.hc_mult = h;
    }
    if dspark {
        s = s.with_dspark();
    }
    Ok((s, shared))
}

/// The embedded default: the `tiny` preset generated in memory (seed 0).
pub fn embedded_model(arm: ExpertArm) -> Result<LoadedModel> {
    let s = Synth::new(Preset::Tiny, EMBEDDED_SEED);
    let src = in_memory(&s)?;
    let weights = Dsv4Weights::load(&src, &s.config, arm)?;
    Ok(LoadedModel {
        tokenizer: Tokenizer::bytes(&s.config),
        label: "embedded:tiny".into(),
        sha256: src.sha256(),
        weights: Arc::new(weights),
    })
}

/// `open_model` for a path, `embedded_model` for none.
pub fn open_or_embedded(path: Option<&Path>, arm: ExpertArm) -> Result<LoadedModel> {
    match path {
        Some(p) => open_model(p, arm),
        None => embedded_model(arm),
    }
}
