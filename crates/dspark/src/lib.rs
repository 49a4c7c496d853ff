//! dspark: the DSpark drafter as a plugin (`libdspark.so`), loaded by the
//! engine through `drafter-abi`. `model.rs` holds the stages and the tap,
//! `markov.rs` the Markov and confidence heads (the CPU reference);
//! `gpu.rs` the same on a GPU. The plugin reads the drafter's `mtp.*`
//! weights from the checkpoint directory the engine runs.
//!
//! Options (JSON), all optional: `{"variant": "exact" | "fp8", "moe":
//! "fused" | "per-expert", "realization": "cpu" | "gpu"}`. The realization
//! defaults to the GPU when the engine passes a device (it runs on one) and
//! to the CPU otherwise.

pub mod gpu;
pub mod markov;
pub mod model;

use std::ffi::CStr;
use std::path::PathBuf;
use std::sync::Arc;

use drafter_abi::{export_drafter, Drafter, DrafterInitV1};
use kvstate::StateStore;
use trunk::cpu::ops::moe::MoeArm;
use trunk::cpu::Variant;

use crate::gpu::DsparkGpu;
use crate::model::{Dspark, DsparkWeights};

/// Where the drafter runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Realization {
    Cpu,
    Gpu,
}

enum Inner {
    Cpu(Dspark),
    Gpu(Box<DsparkGpu>),
}

pub struct DsparkDrafter {
    inner: Inner,
    layout_json: String,
}

impl DsparkDrafter {
    fn state(&self) -> &dyn StateStore {
        match &self.inner {
            Inner::Cpu(d) => &d.state,
            Inner::Gpu(d) => &d.state,
        }
    }
    fn state_mut(&mut self) -> &mut dyn StateStore {
        match &mut self.inner {
            Inner::Cpu(d) => &mut d.state,
            Inner::Gpu(d) => &mut d.state,
        }
    }
    fn weights(&self) -> &DsparkWeights {
        match &self.inner {
            Inner::Cpu(d) => &d.w,
            Inner::Gpu(d) => &d.w,
        }
    }
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
        let o = parse_options(&opts)?;
        let device = usize::try_from(init.device_ordinal).ok();
        let realization = o.realization.unwrap_or(if device.is_some() { Realization::Gpu } else { Realization::Cpu });
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
        let w = Arc::new(w);
        let capacity = init.max_positions as usize;
        let inner = match realization {
            Realization::Cpu => {
                let mut d = Dspark::new(w, o.variant, capacity);
                d.moe = o.moe;
                Inner::Cpu(d)
            }
            Realization::Gpu => {
                // commits come in prefill chunks (64 positions in the engine) or a
                // verified block: 64 rows of scratch cover both
                let d = DsparkGpu::new(w, o.variant, o.moe, device.unwrap_or(0), capacity, 64)
                    .map_err(|e| format!("DSpark on the GPU: {e:#}"))?;
                Inner::Gpu(Box::new(d))
            }
        };
        let mut me = DsparkDrafter { inner, layout_json: String::new() };
        me.layout_json = serde_json::to_string(&**me.state().layout()).map_err(|e| e.to_string())?;
        Ok(me)
    }
    fn tap_layers(&self) -> Vec<u32> {
        self.weights().ds.target_layer_ids.iter().map(|&l| l as u32).collect()
    }
    fn tap_width(&self) -> usize {
        self.weights().ds.target_layer_ids.len() * self.weights().cfg.hidden_size
    }
    fn commit(&mut self, _tokens: &[u32], pos0: u64, taps: &[f32]) -> Result<(), String> {
        match &mut self.inner {
            Inner::Cpu(d) => d.commit(pos0 as usize, taps),
            Inner::Gpu(d) => d.commit(pos0 as usize, taps),
        }
        .map_err(|e| format!("{e:#}"))
    }
    fn propose(&mut self, anchor: u32, ids: &mut [u32], conf: &mut [f32]) -> Result<usize, String> {
        let (d, c) = match &mut self.inner {
            Inner::Cpu(d) => d.forward_spec(anchor).map(|(d, c, _)| (d, c)),
            Inner::Gpu(d) => d.forward_spec(anchor),
        }
        .map_err(|e| format!("{e:#}"))?;
        let k = d.len().min(ids.len());
        ids[..k].copy_from_slice(&d[..k]);
        conf[..k].copy_from_slice(&c[..k]);
        Ok(k)
    }
    fn state_layout(&self) -> String {
        self.layout_json.clone()
    }
    fn state_positions(&self) -> u64 {
        self.state().positions() as u64
    }
    fn state_capacity(&self) -> u64 {
        self.state().capacity() as u64
    }
    fn state_written(&self, class: usize) -> u64 {
        self.state().written(class)
    }
    fn state_read(&self, class: usize, buf: &mut [u8]) -> Result<(), String> {
        self.state().read_live(class, buf).map_err(|e| e.to_string())
    }
    fn state_write(&mut self, class: usize, written: u64, buf: &[u8]) -> Result<(), String> {
        self.state_mut().write_live(class, written, buf).map_err(|e| e.to_string())
    }
    fn state_set_positions(&mut self, positions: u64) {
        self.state_mut().set_positions(positions as usize)
    }
}

/// The plugin's options (see the crate documentation).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    pub variant: Variant,
    pub moe: MoeArm,
    /// None: GPU when the engine passes a device, CPU otherwise.
    pub realization: Option<Realization>,
}

/// Parse the plugin's options; empty means exact, fused, realization by device.
pub fn parse_options(opts: &str) -> Result<Options, String> {
    let mut o = Options { variant: Variant::Exact, moe: MoeArm::Fused, realization: None };
    if opts.trim().is_empty() {
        return Ok(o);
    }
    let v: serde_json::Value =
        serde_json::from_str(opts).map_err(|e| format!("DSpark options are not JSON ({e}): {opts}"))?;
    let obj = v.as_object().ok_or_else(|| format!("DSpark options must be a JSON object: {opts}"))?;
    if let Some(k) = obj.keys().find(|k| !matches!(k.as_str(), "variant" | "moe" | "realization")) {
        return Err(format!("DSpark options: unknown key `{k}` (known: variant, moe, realization)"));
    }
    let text = |key: &str| -> Result<Option<&str>, String> {
        match obj.get(key) {
            None => Ok(None),
            Some(v) => v.as_str().map(Some).ok_or_else(|| format!("DSpark options: `{key}` must be a string, got {v}")),
        }
    };
    o.variant = match text("variant")? {
        None | Some("exact") => Variant::Exact,
        Some("fp8") => Variant::Fp8,
        Some(other) => return Err(format!("DSpark options: variant must be \"exact\" or \"fp8\", got \"{other}\"")),
    };
    if let Some(m) = text("moe")? {
        o.moe = m.parse::<MoeArm>().map_err(|e| format!("DSpark options: {e}"))?;
    }
    o.realization = match text("realization")? {
        None => None,
        Some("cpu") => Some(Realization::Cpu),
        Some("gpu") => Some(Realization::Gpu),
        Some(other) => return Err(format!("DSpark options: realization must be \"cpu\" or \"gpu\", got \"{other}\"")),
    };
    Ok(o)
}

export_drafter!(DsparkDrafter);
