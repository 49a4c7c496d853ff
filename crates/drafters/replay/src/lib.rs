//! A replay drafter: it proposes a known trajectory (a bank's prompt and
//! tokens), so every draft is accepted when the trajectory is the target's
//! own greedy output. It measures the verification pipeline's upper bound.
//!
//! Options (JSON): `{"trajectory": [ids...], "tap_layers": [layers...]}`:
//! the full sequence, prompt first; and, optionally, layers whose hidden
//! states the engine must hand over with every commit (read and ignored
//! here), so that a run measures what shipping a tapping drafter's inputs
//! costs the engine, with every draft accepted.

use drafter_abi::{export_drafter, Drafter, DrafterInitV1};

pub struct ReplayDrafter {
    trajectory: Vec<u32>,
    committed: usize,
    confidence: f32,
    tap_layers: Vec<u32>,
    hidden: usize,
}

/// The integers of the JSON array under `key`.
fn int_array(json: &str, key: &str) -> Option<Vec<u32>> {
    let i = json.find(&format!("\"{key}\""))?;
    let rest = &json[i..];
    let open = rest.find('[')?;
    let close = rest[open..].find(']')? + open;
    rest[open + 1..close].split(',').filter(|s| !s.trim().is_empty()).map(|s| s.trim().parse::<u32>().ok()).collect()
}

impl Drafter for ReplayDrafter {
    fn create(init: &DrafterInitV1) -> Result<Self, String> {
        if init.options_json.is_null() {
            return Err("the replay drafter needs options {\"trajectory\": [...]}".into());
        }
        // SAFETY: the engine passes a NUL-terminated UTF-8 string.
        let opts = unsafe { std::ffi::CStr::from_ptr(init.options_json) }.to_string_lossy().into_owned();
        let trajectory = int_array(&opts, "trajectory").ok_or("options lack a `trajectory` array of token ids")?;
        let tap_layers = match opts.contains("\"tap_layers\"") {
            true => int_array(&opts, "tap_layers").ok_or("`tap_layers` is not an array of layer indices")?,
            false => Vec::new(),
        };
        Ok(ReplayDrafter { trajectory, committed: 0, confidence: 1.0, tap_layers, hidden: init.hidden_size as usize })
    }

    fn tap_layers(&self) -> Vec<u32> {
        self.tap_layers.clone()
    }

    fn tap_width(&self) -> usize {
        self.tap_layers.len() * self.hidden
    }

    fn commit(&mut self, tokens: &[u32], pos0: u64, taps: &[f32]) -> Result<(), String> {
        if pos0 as usize != self.committed {
            return Err(format!("commit at position {pos0}, {} committed", self.committed));
        }
        if taps.len() != tokens.len() * self.tap_width() {
            return Err(format!("{} tap floats for {} tokens of {}", taps.len(), tokens.len(), self.tap_width()));
        }
        self.committed += tokens.len();
        Ok(())
    }

    fn propose(&mut self, anchor: u32, ids: &mut [u32], conf: &mut [f32]) -> Result<usize, String> {
        // the anchor sits at position `committed`; propose what follows it
        if self.trajectory.get(self.committed) != Some(&anchor) {
            return Ok(0);
        }
        let from = self.committed + 1;
        let k = self.trajectory.len().saturating_sub(from).min(ids.len());
        ids[..k].copy_from_slice(&self.trajectory[from..from + k]);
        conf[..k].fill(self.confidence);
        Ok(k)
    }
}

export_drafter!(ReplayDrafter);
