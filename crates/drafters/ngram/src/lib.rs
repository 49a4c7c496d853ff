//! An n-gram (prompt lookup) drafter: it finds the latest earlier occurrence
//! of the last `n` tokens (n from 3 down to 1) in the committed history and
//! proposes the tokens that followed it. Needs nothing but the drafter ABI.
//!
//! Options (JSON): `{"max_n": 3, "confidence": 0.8}`.

use drafter_abi::{export_drafter, Drafter, DrafterInitV1};

pub struct NgramDrafter {
    history: Vec<u32>,
    max_n: usize,
    confidence: f32,
}

fn option(json: &str, key: &str) -> Option<f64> {
    let i = json.find(&format!("\"{key}\""))?;
    let rest = &json[i + key.len() + 2..];
    let rest = rest.trim_start().strip_prefix(':')?.trim_start();
    let end = rest.find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-' || c == 'e')).unwrap_or(rest.len());
    rest[..end].parse().ok()
}

impl Drafter for NgramDrafter {
    fn create(init: &DrafterInitV1) -> Result<Self, String> {
        let opts = if init.options_json.is_null() {
            String::new()
        } else {
            // SAFETY: the engine passes a NUL-terminated UTF-8 string.
            unsafe { std::ffi::CStr::from_ptr(init.options_json) }.to_string_lossy().into_owned()
        };
        Ok(NgramDrafter {
            history: Vec::new(),
            max_n: option(&opts, "max_n").unwrap_or(3.0) as usize,
            confidence: option(&opts, "confidence").unwrap_or(0.8) as f32,
        })
    }

    fn commit(&mut self, tokens: &[u32], pos0: u64, _taps: &[f32]) -> Result<(), String> {
        if pos0 as usize != self.history.len() {
            return Err(format!("commit at position {pos0}, history has {}", self.history.len()));
        }
        self.history.extend_from_slice(tokens);
        Ok(())
    }

    fn propose(&mut self, anchor: u32, ids: &mut [u32], conf: &mut [f32]) -> Result<usize, String> {
        let mut seq = self.history.clone();
        seq.push(anchor);
        for n in (1..=self.max_n.min(seq.len() - 1)).rev() {
            let tail = &seq[seq.len() - n..];
            // latest earlier occurrence whose continuation exists
            for start in (0..seq.len() - n).rev() {
                if &seq[start..start + n] == tail {
                    let from = start + n;
                    let k = (seq.len() - from).min(ids.len());
                    if k == 0 {
                        continue;
                    }
                    ids[..k].copy_from_slice(&seq[from..from + k]);
                    conf[..k].fill(self.confidence);
                    return Ok(k);
                }
            }
        }
        Ok(0)
    }
}

export_drafter!(NgramDrafter);
