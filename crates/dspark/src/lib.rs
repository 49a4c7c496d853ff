//! dspark: the DSpark drafter as a plugin (`libdspark.so`), loaded by the
//! engine through `drafter-abi`. `model.rs` holds the stages and the tap,
//! `markov.rs` the Markov and confidence heads; the plugin reads the
//! drafter's `mtp.*` weights from the checkpoint directory the engine runs.
//!
//! Options (JSON): `{"variant": "exact" | "fp8", "moe": "fused" | "per-expert"}`,
//! both optional (exact, fused).

pub mod markov;
pub mod model;

use std::ffi::CStr;
use std::path::PathBuf;
use std::sync::Arc;

use drafter_abi::{export_drafter, Drafter, DrafterInitV1};
use kvstate::StateStore;
use trunk::cpu::ops::moe::MoeArm;
use trunk::cpu::Variant;

use crate::model::{Dspark, DsparkWeights};

pub struct DsparkDrafter {
    inner: Dspark,
    layout_json: String,
}

impl Drafter for DsparkDrafter {
    fn create(init: &DrafterInitV1) -> Result<Self, String> {
        if init.model_dir.is_null() {
            return Err("DSpark needs the checkpoint directory (model_dir)".into());
        }
        // SAFETY: NUL-terminated UTF-8 from the engine.
        let dir = PathBuf::from(unsafe { CStr::from_ptr(init.model_dir) }.to_string_lossy().into_owned());
        let opts = if init.options_json.is_null() {
            String::new()
        } else {
            // SAFETY: as above.
            unsafe { CStr::from_ptr(init.options_json) }.to_string_lossy().into_owned()
        };
        let (variant, moe) = parse_options(&opts)?;
        let w = DsparkWeights::load(&dir).map_err(|e| format!("{e:#}"))?;
        if w.cfg.hidden_size != init.hidden_size as usize || w.cfg.vocab_size != init.vocab_size as usize {
            return Err(format!(
                "{}: DSpark for hidden {} / vocab {}, the engine runs hidden {} / vocab {}",
                dir.display(),
                w.cfg.hidden_size,
                w.cfg.vocab_size,
                init.hidden_size,
                init.vocab_size
            ));
        }
        let mut inner = Dspark::new(Arc::new(w), variant, init.max_positions as usize);
        inner.moe = moe;
        let layout_json = serde_json::to_string(&**inner.state.layout()).map_err(|e| e.to_string())?;
        Ok(DsparkDrafter { inner, layout_json })
    }
    fn tap_layers(&self) -> Vec<u32> {
        self.inner.w.ds.target_layer_ids.iter().map(|&l| l as u32).collect()
    }
    fn tap_width(&self) -> usize {
        self.inner.tap_width()
    }
    fn commit(&mut self, _tokens: &[u32], pos0: u64, taps: &[f32]) -> Result<(), String> {
        self.inner.commit(pos0 as usize, taps).map_err(|e| format!("{e:#}"))
    }
    fn propose(&mut self, anchor: u32, ids: &mut [u32], conf: &mut [f32]) -> Result<usize, String> {
        let (d, c, _) = self.inner.forward_spec(anchor).map_err(|e| format!("{e:#}"))?;
        let k = d.len().min(ids.len());
        ids[..k].copy_from_slice(&d[..k]);
        conf[..k].copy_from_slice(&c[..k]);
        Ok(k)
    }
    fn state_layout(&self) -> String {
        self.layout_json.clone()
    }
    fn state_positions(&self) -> u64 {
        self.inner.state.positions() as u64
    }
    fn state_capacity(&self) -> u64 {
        self.inner.state.capacity() as u64
    }
    fn state_written(&self, class: usize) -> u64 {
        self.inner.state.written(class)
    }
    fn state_read(&self, class: usize, buf: &mut [u8]) -> Result<(), String> {
        self.inner.state.read_live(class, buf).map_err(|e| e.to_string())
    }
    fn state_write(&mut self, class: usize, written: u64, buf: &[u8]) -> Result<(), String> {
        self.inner.state.write_live(class, written, buf).map_err(|e| e.to_string())
    }
    fn state_set_positions(&mut self, positions: u64) {
        self.inner.state.set_positions(positions as usize)
    }
}

/// The plugin's options: `{"variant": "exact" | "fp8", "moe": "fused" | "per-expert"}`,
/// each optional; empty means exact and fused.
pub fn parse_options(opts: &str) -> Result<(Variant, MoeArm), String> {
    if opts.trim().is_empty() {
        return Ok((Variant::Exact, MoeArm::Fused));
    }
    let v: serde_json::Value =
        serde_json::from_str(opts).map_err(|e| format!("DSpark options are not JSON ({e}): {opts}"))?;
    let obj = v.as_object().ok_or_else(|| format!("DSpark options must be a JSON object: {opts}"))?;
    if let Some(k) = obj.keys().find(|k| !matches!(k.as_str(), "variant" | "moe")) {
        return Err(format!("DSpark options: unknown key `{k}` (known: variant, moe)"));
    }
    let text = |key: &str| -> Result<Option<&str>, String> {
        match obj.get(key) {
            None => Ok(None),
            Some(v) => v.as_str().map(Some).ok_or_else(|| format!("DSpark options: `{key}` must be a string, got {v}")),
        }
    };
    let variant = match text("variant")? {
        None | Some("exact") => Variant::Exact,
        Some("fp8") => Variant::Fp8,
        Some(other) => return Err(format!("DSpark options: variant must be \"exact\" or \"fp8\", got \"{other}\"")),
    };
    let moe = match text("moe")? {
        None => MoeArm::Fused,
        Some(m) => m.parse::<MoeArm>().map_err(|e| format!("DSpark options: {e}"))?,
    };
    Ok((variant, moe))
}

export_drafter!(DsparkDrafter);
