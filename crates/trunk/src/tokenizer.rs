//! Text <-> token ids through the `tokenizers` crate: a model's
//! `tokenizer.json`, or the byte-level tokenizer of synthetic models.

use std::path::{Path, PathBuf};

use anyhow::{anyhow, Context, Result};

use crate::config::Dsv4Config;
use crate::synth::tokenizer::tokenizer_json;

pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    pub source: String,
    /// The `tokenizer.json` a checkpoint lacked, where the byte-level
    /// tokenizer stands in for it: its ids mean nothing to a real model.
    pub missing: Option<PathBuf>,
}

impl Tokenizer {
    /// The byte-level tokenizer synthetic models ship.
    pub fn bytes(cfg: &Dsv4Config) -> Self {
        let json = serde_json::to_vec(&tokenizer_json(cfg)).expect("tokenizer json");
        let inner = tokenizers::Tokenizer::from_bytes(&json).expect("the synthetic tokenizer is valid");
        Tokenizer { inner, source: "byte-level".into(), missing: None }
    }

    /// `path` if it exists, else the byte-level tokenizer standing in for
    /// it (`missing` names the path).
    pub fn load_or_bytes(path: &Path, cfg: &Dsv4Config) -> Result<Self> {
        if path.exists() {
            let inner = tokenizers::Tokenizer::from_file(path)
                .map_err(|e| anyhow!("{e}"))
                .with_context(|| format!("loading {}", path.display()))?;
            Ok(Tokenizer { inner, source: path.display().to_string(), missing: None })
        } else {
            Ok(Tokenizer { missing: Some(path.to_path_buf()), ..Self::bytes(cfg) })
        }
    }

    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        Ok(self.inner.encode(text, false).map_err(|e| anyhow!("tokenizing: {e}"))?.get_ids().to_vec())
    }

    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        self.inner.decode(ids, true).map_err(|e| anyhow!("detokenizing: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synth::Preset;

    #[test]
    fn byte_tokenizer_round_trips_text() {
        let t = Tokenizer::bytes(&Preset::Tiny.config());
        let text = "Hello, wörld! \n\t ≈ 42";
        let ids = t.encode(text).unwrap();
        assert_eq!(ids.len(), text.len(), "one token per byte");
        assert!(ids.iter().all(|&i| (2..258).contains(&i)));
        assert_eq!(t.decode(&ids).unwrap(), text);
        assert_eq!(ids[0], 2 + b'H' as u32);
    }
}
