//! The teacher-forced gate: a realization is fed a banked CPU trajectory
//! token by token, and its argmax at every position is compared with the
//! banked token. A disagreement is legitimate only inside the drift band
//! (band.rs); anything else fails the gate, and so does a disagreement the
//! bank cannot resolve. The whole pass runs twice from a fresh state and
//! must repeat bit for bit.

use anyhow::{bail, Result};
use serde::Serialize;
use sha2::{Digest, Sha256};

use trunk::bank::{Bank, BANK_TOP};
use trunk::generate::{argmax, top_k};

/// Something that produces teacher-forced logits: row 0 after `prompt`,
/// row i after `prompt ++ tokens[..i]`, for `tokens.len()` rows.
pub trait TeacherForced {
    fn logits(&self, prompt: &[u32], tokens: &[u32]) -> Result<Vec<f32>>;
    fn vocab(&self) -> usize;
    fn describe(&self) -> String;
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Agree,
    InBand,
    OutOfBand,
    Unresolved,
}

/// One disagreement, with the numbers that classified it.
#[derive(Clone, Debug, Serialize)]
pub struct Disagreement {
    pub position: usize,
    pub banked: u32,
    pub picked: u32,
    pub verdict: Verdict,
    /// CPU logit of the banked token minus that of the pick (a lower bound
    /// when the pick is outside the banked top-8).
    pub cpu_gap: f64,
    /// Realization's logit of the pick minus that of the banked token.
    pub gpu_gap: f64,
    pub band: f64,
    /// The realization's top-8 at this position.
    pub row_top8: Vec<(u32, f32)>,
}

/// Classify one position. `bank_ids`/`bank_logits` are the banked top-8.
pub fn classify(
    position: usize,
    bank_ids: &[u32],
    bank_logits: &[f32],
    row: &[f32],
    c_sum: f64,
) -> (Verdict, Option<Disagreement>) {
    let banked = bank_ids[0];
    let picked = argmax(row);
    if picked == banked {
        return (Verdict::Agree, None);
    }
    let band = 3.0 * std::f64::consts::SQRT_2 * c_sum * (bank_logits[0] as f64).abs();
    let gpu_gap = row[picked as usize] as f64 - row[banked as usize] as f64;
    let (verdict, cpu_gap) = match bank_ids.iter().position(|&i| i == picked) {
        Some(k) => {
            let cpu_gap = bank_logits[0] as f64 - bank_logits[k] as f64;
            (if cpu_gap + gpu_gap <= band { Verdict::InBand } else { Verdict::OutOfBand }, cpu_gap)
        }
        None => {
            // the pick's CPU logit is at most the 8th banked logit
            let lower = bank_logits[0] as f64 - *bank_logits.last().unwrap() as f64;
            (if lower + gpu_gap > band { Verdict::OutOfBand } else { Verdict::Unresolved }, lower)
        }
    };
    (
        verdict,
        Some(Disagreement {
            position,
            banked,
            picked,
            verdict,
            cpu_gap,
            gpu_gap,
            band,
            row_top8: top_k(row, BANK_TOP),
        }),
    )
}

#[derive(Clone, Debug, Serialize)]
pub struct TfReport {
    pub realization: String,
    pub bank_variant: String,
    pub positions: usize,
    pub agree: usize,
    pub in_band: usize,
    pub out_of_band: usize,
    pub unresolved: usize,
    pub determinism: bool,
    pub stream_sha256: [String; 2],
    pub c_sum: f64,
    /// Largest |row[banked] - banked logit| / |banked logit| over positions.
    pub max_rel_drift_top1: f64,
    pub pass: bool,
    pub disagreements: Vec<Disagreement>,
}

fn sha(v: &[f32]) -> String {
    let mut h = Sha256::new();
    for x in v {
        h.update(x.to_le_bytes());
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// Run the gate. `c_sum` is `C_realization + C_cpu`.
pub fn tf_gate(r: &dyn TeacherForced, bank: &Bank, c_sum: f64) -> Result<TfReport> {
    bank.check()?;
    let n = bank.tokens.len();
    let v = r.vocab();
    bank.check_vocab(v)?;
    let first = r.logits(&bank.prompt, &bank.tokens)?;
    let second = r.logits(&bank.prompt, &bank.tokens)?;
    if first.len() != n * v {
        bail!("{} returned {} logits, expected {n} x {v}", r.describe(), first.len());
    }
    let picks = |l: &[f32]| l.chunks(v).map(argmax).collect::<Vec<_>>();
    let (s1, s2) = (sha(&first), sha(&second));
    let determinism = s1 == s2 && picks(&first) == picks(&second);
    let mut rep = TfReport {
        realization: r.describe(),
        bank_variant: bank.variant.clone(),
        positions: n,
        agree: 0,
        in_band: 0,
        out_of_band: 0,
        unresolved: 0,
        determinism,
        stream_sha256: [s1, s2],
        c_sum,
        max_rel_drift_top1: 0.0,
        pass: false,
        disagreements: Vec::new(),
    };
    for i in 0..n {
        let row = &first[i * v..(i + 1) * v];
        let ids = &bank.top8_ids[i * BANK_TOP..(i + 1) * BANK_TOP];
        let lg = &bank.top8_logits[i * BANK_TOP..(i + 1) * BANK_TOP];
        let drift = (row[ids[0] as usize] as f64 - lg[0] as f64).abs() / (lg[0] as f64).abs().max(1e-30);
        rep.max_rel_drift_top1 = rep.max_rel_drift_top1.max(drift);
        let (verdict, d) = classify(i, ids, lg, row, c_sum);
        match verdict {
            Verdict::Agree => rep.agree += 1,
            Verdict::InBand => rep.in_band += 1,
            Verdict::OutOfBand => rep.out_of_band += 1,
            Verdict::Unresolved => rep.unresolved += 1,
        }
        rep.disagreements.extend(d);
    }
    rep.pass = rep.determinism && rep.out_of_band == 0 && rep.unresolved == 0;
    Ok(rep)
}

/// The CPU oracle as a realization (used to test the gate without a GPU,
/// and to judge one CPU variant against another's bank).
pub struct CpuRealization<'a>(pub &'a trunk::cpu::CpuOracle);

impl TeacherForced for CpuRealization<'_> {
    fn logits(&self, prompt: &[u32], tokens: &[u32]) -> Result<Vec<f32>> {
        use trunk::cpu::Logits;
        let o = self.0;
        let mut st = o.new_state(prompt.len() + tokens.len());
        let mut out = o.forward(&mut st, prompt, Logits::Last)?;
        for &t in &tokens[..tokens.len().saturating_sub(1)] {
            out.extend(o.forward(&mut st, &[t], Logits::Last)?);
        }
        Ok(out)
    }
    fn vocab(&self) -> usize {
        self.0.weights.config.vocab_size
    }
    fn describe(&self) -> String {
        format!("cpu/{}", self.0.variant)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classification_covers_every_case() {
        let ids = [5u32, 7, 9, 11, 13, 15, 17, 19];
        let lg = [10.0f32, 9.99, 9.0, 8.0, 7.0, 6.0, 5.0, 4.0];
        let mut row = vec![0.0f32; 32];
        row[5] = 10.0;
        row[7] = 9.9;
        assert_eq!(classify(0, &ids, &lg, &row, 1e-3).0, Verdict::Agree);
        // a near-tie swapped within the band: cpu gap 0.01, gpu gap 0.005, band 3*sqrt2*1e-3*10 = 0.042
        row[7] = 10.005;
        assert_eq!(classify(0, &ids, &lg, &row, 1e-3).0, Verdict::InBand);
        // the same swap with a tighter band is a bug
        assert_eq!(classify(0, &ids, &lg, &row, 1e-5).0, Verdict::OutOfBand);
        // a pick outside the top-8, far above: out of band by the lower bound
        row[7] = 0.0;
        row[30] = 30.0;
        assert_eq!(classify(0, &ids, &lg, &row, 1e-3).0, Verdict::OutOfBand);
        // outside the top-8 with a bound inside a (wide) band: unresolved
        row[30] = 10.01;
        assert_eq!(classify(0, &ids, &lg, &row, 1.0).0, Verdict::Unresolved);
    }
}
