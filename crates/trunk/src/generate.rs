//! Greedy generation on the CPU oracle, and the helpers every path shares
//! (argmax with ties to the lower id, top-k of a logits row, token files).

use std::path::Path;
use std::time::Instant;

use anyhow::{bail, Context, Result};

use crate::cpu::{CpuOracle, Logits};

/// Index of the largest value; ties go to the lower index. NaN never wins.
pub fn argmax(v: &[f32]) -> u32 {
    let mut best = 0usize;
    for (i, &x) in v.iter().enumerate() {
        if x > v[best] || v[best].is_nan() && !x.is_nan() {
            best = i;
        }
    }
    best as u32
}

/// The `k` largest (id, logit), descending; ties to the lower id.
pub fn top_k(v: &[f32], k: usize) -> Vec<(u32, f32)> {
    let mut idx: Vec<u32> = (0..v.len() as u32).collect();
    let k = k.min(v.len());
    let cmp = |a: &u32, b: &u32| v[*b as usize].total_cmp(&v[*a as usize]).then(a.cmp(b));
    if k < idx.len() {
        idx.select_nth_unstable_by(k, cmp);
        idx.truncate(k);
    }
    idx.sort_by(cmp);
    idx.into_iter().map(|i| (i, v[i as usize])).collect()
}

/// Result of a generation.
#[derive(Clone, Debug)]
pub struct Generation {
    pub prompt_tokens: usize,
    /// New tokens only.
    pub tokens: Vec<u32>,
    pub prefill_seconds: f64,
    pub decode_seconds: f64,
}

impl Generation {
    /// Throughput: new tokens over prefill + decode time (as the
    /// speculative path counts it).
    pub fn tokens_per_s(&self) -> f64 {
        let total = self.prefill_seconds + self.decode_seconds;
        if total > 0.0 {
            self.tokens.len() as f64 / total
        } else {
            0.0
        }
    }
}

/// Greedy decoding on the CPU oracle: prefill, then one token at a time.
/// Stops after `max_new` tokens or at `stop` (included in the output).
pub fn greedy_cpu(oracle: &CpuOracle, prompt: &[u32], max_new: usize, stop: Option<u32>) -> Result<Generation> {
    greedy_cpu_with(oracle, prompt, max_new, stop, |_, _| {})
}

/// `greedy_cpu` calling `on_step(step, logits)` with the logits that chose each token.
pub fn greedy_cpu_with(
    oracle: &CpuOracle,
    prompt: &[u32],
    max_new: usize,
    stop: Option<u32>,
    mut on_step: impl FnMut(usize, &[f32]),
) -> Result<Generation> {
    if prompt.is_empty() {
        bail!("the prompt is empty: give at least one token");
    }
    let mut state = oracle.new_state(prompt.len() + max_new);
    let t = Instant::now();
    let mut logits = oracle.forward(&mut state, prompt, Logits::Last)?;
    let prefill_seconds = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let mut tokens = Vec::with_capacity(max_new);
    for step in 0..max_new {
        on_step(step, &logits);
        let next = argmax(&logits);
        tokens.push(next);
        if Some(next) == stop || step + 1 == max_new {
            break;
        }
        logits = oracle.forward(&mut state, &[next], Logits::Last)?;
    }
    Ok(Generation { prompt_tokens: prompt.len(), tokens, prefill_seconds, decode_seconds: t.elapsed().as_secs_f64() })
}

/// A tokens file: a JSON array of ids, or an object with a `tokens` array;
/// every id below `vocab`.
pub fn read_tokens_file(path: &Path, vocab: usize) -> Result<Vec<u32>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let v: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("{}: not valid JSON", path.display()))?;
    let arr = match &v {
        serde_json::Value::Array(a) => a,
        serde_json::Value::Object(o) => o
            .get("tokens")
            .and_then(|t| t.as_array())
            .with_context(|| format!("{}: object without a `tokens` array", path.display()))?,
        _ => bail!("{}: expected an array of token ids or an object with `tokens`", path.display()),
    };
    arr.iter()
        .enumerate()
        .map(|(i, x)| match x.as_u64() {
            Some(id) if (id as usize) < vocab => Ok(id as u32),
            Some(_) => bail!("{}: tokens[{i}] = {x} is outside the vocabulary ({vocab})", path.display()),
            None => bail!("{}: tokens[{i}] = {x} is not a token id", path.display()),
        })
        .collect()
}

/// A seeded random prompt of `n` ids in `[lo, hi)`.
pub fn random_prompt(n: usize, seed: u64, lo: u32, hi: u32) -> Vec<u32> {
    let mut r = crate::synth::rng::Rng::new(seed, "prompt", 0);
    (0..n).map(|_| lo + r.below((hi - lo) as u64) as u32).collect()
}

/// Greedy decoding on the GPU: chunked prefill, then `decode_step_greedy`
/// (the argmax is taken on the device; 4 bytes come back per token).
pub fn greedy_gpu(gpu: &crate::gpu::Dsv4Gpu, prompt: &[u32], max_new: usize, stop: Option<u32>) -> Result<Generation> {
    if prompt.is_empty() {
        bail!("the prompt is empty: give at least one token");
    }
    let chunk = prompt.len().clamp(1, 512);
    let mut st = gpu.alloc_decode_state_for_transient(prompt.len() + max_new, chunk)?;
    let t = Instant::now();
    let logits = gpu.prefill_with_cache_chunked(&mut st, prompt, chunk, Logits::Last)?;
    let prefill_seconds = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let mut tokens = Vec::with_capacity(max_new);
    let mut next = argmax(&logits);
    for step in 0..max_new {
        tokens.push(next);
        if Some(next) == stop || step + 1 == max_new {
            break;
        }
        next = gpu.decode_step_greedy(&mut st, next)?;
    }
    Ok(Generation { prompt_tokens: prompt.len(), tokens, prefill_seconds, decode_seconds: t.elapsed().as_secs_f64() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn argmax_and_top_k_break_ties_low() {
        assert_eq!(argmax(&[1.0, 3.0, 3.0, 2.0]), 1);
        assert_eq!(argmax(&[f32::NAN, 1.0]), 1);
        let t = top_k(&[1.0, 3.0, 3.0, 2.0, -1.0], 3);
        assert_eq!(t, vec![(1, 3.0), (2, 3.0), (3, 2.0)]);
    }
}
