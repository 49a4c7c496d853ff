//! Batch invariance on the GPU: chunked prefill at several widths and token
//! by token decode must give bit-identical logits and cache classes; the
//! monolithic prefill may differ in rounding only (every disagreement of a
//! 16-step teacher-forced continuation in band); the fused and per-expert
//! MoE arms must give identical bits.

use anyhow::Result;
use serde::Serialize;
use sha2::{Digest, Sha256};

use trunk::cpu::Logits;
use trunk::generate::argmax;
use trunk::gpu::{Dsv4Gpu, MoeArm};

#[derive(Clone, Debug, Serialize)]
pub struct WidthRun {
    pub width: usize,
    pub logits_sha256: String,
    pub cache_sha256: String,
}

#[derive(Clone, Debug, Serialize)]
pub struct ChunkReport {
    pub tokens: usize,
    pub runs: Vec<WidthRun>,
    /// Every width and the token-by-token decode agree bit for bit.
    pub chunk_bit_identical: bool,
    /// Monolithic prefill + 16 teacher-forced steps against the chunked run.
    pub monolithic_bit_identical: bool,
    pub monolithic_max_rel_diff: f64,
    pub monolithic_disagreements: usize,
    pub monolithic_out_of_band: usize,
    /// Fused and per-expert MoE arms give the same logits bits.
    pub moe_arms_bit_identical: bool,
    /// Greedy decode steps (`decode_step_greedy`: a CUDA graph a step on
    /// one device) fed the same tokens return the argmax of the decode
    /// logits at every position and leave the same cache bits.
    pub greedy_steps_identical: bool,
    pub pass: bool,
}

fn sha_f32(v: &[f32]) -> String {
    let mut h = Sha256::new();
    for x in v {
        h.update(x.to_le_bytes());
    }
    hex(&h.finalize())
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn cache_sha(gpu: &Dsv4Gpu, st: &trunk::gpu::GpuState) -> Result<String> {
    let mut h = Sha256::new();
    for (name, bytes) in gpu.cache_classes(st)? {
        h.update(name.as_bytes());
        h.update(&bytes);
    }
    Ok(hex(&h.finalize()))
}

/// Run the checks over `tokens` (the last 16 are the teacher-forced tail).
pub fn check_chunks(gpu: &mut Dsv4Gpu, tokens: &[u32], widths: &[usize], c_sum: f64) -> Result<ChunkReport> {
    let n = tokens.len();
    let v = gpu.config.vocab_size;
    let mut runs: Vec<WidthRun> = Vec::new();
    let mut reference: Option<Vec<f32>> = None;
    let mut same = true;
    for &w in widths {
        let mut st = gpu.alloc_decode_state_for_transient(n, w)?;
        let l = gpu.prefill_with_cache_chunked(&mut st, tokens, w, Logits::All)?;
        let run = WidthRun { width: w, logits_sha256: sha_f32(&l), cache_sha256: cache_sha(gpu, &st)? };
        if let Some(r) = runs.first() {
            same &= run.logits_sha256 == r.logits_sha256 && run.cache_sha256 == r.cache_sha256;
        }
        runs.push(run);
        reference.get_or_insert(l);
    }
    // token by token through decode_step
    let mut st = gpu.alloc_decode_state_for_transient(n, 1)?;
    let mut dl = Vec::with_capacity(n * v);
    for &t in tokens {
        dl.extend(gpu.decode_step(&mut st, t)?);
    }
    let dec = WidthRun { width: 0, logits_sha256: sha_f32(&dl), cache_sha256: cache_sha(gpu, &st)? };
    if let Some(r) = runs.first() {
        same &= dec.logits_sha256 == r.logits_sha256 && dec.cache_sha256 == r.cache_sha256;
    }
    runs.push(dec);
    // token by token through decode_step_greedy
    let mut st = gpu.alloc_decode_state_for_transient(n, 1)?;
    let greedy = tokens.iter().map(|&t| gpu.decode_step_greedy(&mut st, t)).collect::<Result<Vec<u32>>>()?;
    let greedy_same = greedy_agrees(&greedy, &dl, v) && cache_sha(gpu, &st)? == runs[runs.len() - 1].cache_sha256;
    let reference = reference.unwrap_or(dl);

    // monolithic prefill of all but the last 16, then 16 decode steps
    let tail = 16.min(n - 1);
    let head = n - tail;
    let mut st = gpu.alloc_decode_state_for(n)?;
    let mut ml = gpu.prefill_with_cache(&mut st, &tokens[..head], Logits::All)?;
    for &t in &tokens[head..] {
        ml.extend(gpu.decode_step(&mut st, t)?);
    }
    let mut max_rel = 0.0f64;
    let (mut dis, mut oob) = (0, 0);
    for (a, b) in ml.chunks(v).zip(reference.chunks(v)) {
        let scale = b.iter().fold(0.0f32, |m, x| m.max(x.abs())) as f64;
        let d = a.iter().zip(b).fold(0.0f32, |m, (x, y)| m.max((x - y).abs())) as f64;
        max_rel = max_rel.max(d / scale.max(1e-30));
        let (pa, pb) = (argmax(a), argmax(b));
        if pa != pb {
            dis += 1;
            let swing = (a[pa as usize] - a[pb as usize]) as f64 + (b[pb as usize] - b[pa as usize]) as f64;
            let band = 3.0 * std::f64::consts::SQRT_2 * c_sum * (b[pb as usize] as f64).abs();
            if swing > band {
                oob += 1;
            }
        }
    }
    let mono_same = sha_f32(&ml) == sha_f32(&reference);

    // MoE arms
    let saved = gpu.opts.moe;
    let mut shas = Vec::new();
    for arm in [MoeArm::Fused, MoeArm::PerExpert] {
        gpu.opts.moe = arm;
        let w = widths.first().copied().unwrap_or(n);
        let mut st = gpu.alloc_decode_state_for_transient(n, w)?;
        shas.push(sha_f32(&gpu.prefill_with_cache_chunked(&mut st, tokens, w, Logits::All)?));
    }
    gpu.opts.moe = saved;
    let arms_same = shas[0] == shas[1];
    Ok(ChunkReport {
        tokens: n,
        runs,
        chunk_bit_identical: same,
        monolithic_bit_identical: mono_same,
        monolithic_max_rel_diff: max_rel,
        monolithic_disagreements: dis,
        monolithic_out_of_band: oob,
        moe_arms_bit_identical: arms_same,
        greedy_steps_identical: greedy_same,
        pass: same && oob == 0 && arms_same && greedy_same,
    })
}

/// Whether `ids` are, position by position, the argmax of the rows of
/// `logits` (rows of `vocab`), as many as there are rows.
pub fn greedy_agrees(ids: &[u32], logits: &[f32], vocab: usize) -> bool {
    ids.len() * vocab == logits.len() && ids.iter().zip(logits.chunks(vocab)).all(|(&id, row)| id == argmax(row))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greedy_ids_must_be_each_rows_argmax() {
        let logits = [0.1f32, 0.9, 0.3, /* row 2 */ 2.0, -1.0, 2.0];
        assert!(greedy_agrees(&[1, 0], &logits, 3)); // a tie goes to the lower id
        assert!(!greedy_agrees(&[1, 2], &logits, 3));
        assert!(!greedy_agrees(&[2, 0], &logits, 3));
        // one id short or one too many
        assert!(!greedy_agrees(&[1], &logits, 3));
        assert!(!greedy_agrees(&[1, 0, 0], &logits, 3));
    }
}
