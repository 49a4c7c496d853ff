//! Banked trajectories: greedy decoding on the CPU oracle with the top-8 of
//! every step, the reference the GPU gates are judged against.

use serde::{Deserialize, Serialize};

use anyhow::{bail, Result};

use crate::cpu::CpuOracle;
use crate::generate::{greedy_cpu_with, top_k};

pub const BANK_TOP: usize = 8;

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Bank {
    pub variant: String,
    pub expert_arm: String,
    pub config_name: String,
    pub model: String,
    pub source_sha256: String,
    pub prompt: Vec<u32>,
    /// Greedy tokens; `tokens[i]` is the argmax of the logits after
    /// `prompt ++ tokens[..i]`.
    pub tokens: Vec<u32>,
    /// `n * 8` ids, descending by logit; `top8_ids[8i] == tokens[i]`.
    pub top8_ids: Vec<u32>,
    pub top8_logits: Vec<f32>,
}

impl Bank {
    /// Run the oracle greedily for `n` tokens after `prompt`.
    pub fn record(
        oracle: &CpuOracle,
        prompt: &[u32],
        n: usize,
        ids: (&str, &str, &str),
        mut progress: impl FnMut(usize),
    ) -> Result<Bank> {
        let mut top8_ids = Vec::with_capacity(n * BANK_TOP);
        let mut top8_logits = Vec::with_capacity(n * BANK_TOP);
        let g = greedy_cpu_with(oracle, prompt, n, None, |step, logits| {
            for (id, l) in top_k(logits, BANK_TOP) {
                top8_ids.push(id);
                top8_logits.push(l);
            }
            progress(step + 1);
        })?;
        let (config_name, model, sha) = ids;
        let b = Bank {
            variant: oracle.variant.to_string(),
            expert_arm: format!("{:?}", oracle.weights.expert_arm).to_lowercase(),
            config_name: config_name.into(),
            model: model.into(),
            source_sha256: sha.into(),
            prompt: prompt.to_vec(),
            tokens: g.tokens,
            top8_ids,
            top8_logits,
        };
        b.check()?;
        Ok(b)
    }

    /// The invariants a bank must satisfy.
    pub fn check(&self) -> Result<()> {
        let n = self.tokens.len();
        if self.top8_ids.len() != n * BANK_TOP || self.top8_logits.len() != n * BANK_TOP {
            bail!("bank: {} tokens but {} top-8 ids and {} logits", n, self.top8_ids.len(), self.top8_logits.len());
        }
        for i in 0..n {
            if self.top8_ids[i * BANK_TOP] != self.tokens[i] {
                bail!(
                    "bank: position {i}: top-1 id {} is not the banked token {}",
                    self.top8_ids[i * BANK_TOP],
                    self.tokens[i]
                );
            }
            let l = &self.top8_logits[i * BANK_TOP..(i + 1) * BANK_TOP];
            if l.windows(2).any(|w| w[0].is_nan() || w[1].is_nan() || w[0] < w[1]) {
                bail!("bank: position {i}: top-8 logits are not non-increasing: {l:?}");
            }
        }
        Ok(())
    }

    /// Every id the bank holds (prompt, tokens, top-8) is below `vocab`:
    /// a model the bank was not made from may have a smaller vocabulary.
    pub fn check_vocab(&self, vocab: usize) -> Result<()> {
        let lists = [("prompt", &self.prompt), ("tokens", &self.tokens), ("top8_ids", &self.top8_ids)];
        for (field, ids) in lists {
            if let Some((i, id)) = ids.iter().enumerate().find(|(_, &id)| id as usize >= vocab) {
                bail!("bank: {field}[{i}] = {id} is outside the vocabulary ({vocab})");
            }
        }
        Ok(())
    }
}
