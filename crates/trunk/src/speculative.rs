//! Speculative greedy decoding: a drafter proposes a block after the
//! anchor (the last token produced), the target verifies anchor + drafts in
//! one batched pass, the longest prefix of drafts that equal the target's
//! argmax is accepted with the target's next argmax as the bonus token, and
//! the target state is rewound past the rejection. Because the target's
//! forward is batch invariant (a verify pass gives the logits decode steps
//! would give, bit for bit) and the rewind restores exactly the state those
//! decode steps leave, the tokens equal plain greedy decoding's.
//!
//! The verify length per step comes from the confidence-scheduled prefix
//! scheduler (DSpark paper, Algorithm 1, for one request): verify the draft
//! prefix that maximizes `tau * SPS(B)`, `tau` the expected tokens (1 plus
//! the running products of confidences) and `SPS(B)` the target's measured
//! steps per second at `B` tokens. Algorithm 1 admits drafts greedily and
//! stops at the first drop; with one request and at most `ceiling` prefixes
//! the full scan costs nothing and never picks a worse prefix (a slow width
//! in the profile can hide a better, longer one).

use std::time::Instant;

use anyhow::{bail, Result};
use kvstate::StateStore;

use crate::cpu::{CpuOracle, Logits};
use crate::drafter::Drafter;
use crate::generate::argmax;

/// A target model the speculative loop can drive.
pub trait Target {
    type State: StateStore;
    fn vocab(&self) -> usize;
    fn hidden(&self) -> usize;
    /// A state for `capacity` positions, chunks of up to `chunk` tokens, with
    /// rings able to rewind `slack` positions.
    fn new_state(&self, capacity: usize, chunk: usize, slack: usize) -> Result<Self::State>;
    /// Run `tokens`; logits per `which`, and the taps of `tap_layers` for
    /// every token (empty when none are asked for).
    fn run(
        &self,
        st: &mut Self::State,
        tokens: &[u32],
        which: Logits,
        tap_layers: &[usize],
    ) -> Result<(Vec<f32>, Vec<f32>)>;
    /// Rewind to `positions` consumed positions.
    fn rewind(&self, st: &mut Self::State, positions: usize) -> Result<()>;
}

impl Target for CpuOracle {
    type State = kvstate::HostState;
    fn vocab(&self) -> usize {
        self.weights.config.vocab_size
    }
    fn hidden(&self) -> usize {
        self.weights.config.hidden_size
    }
    fn new_state(&self, capacity: usize, _chunk: usize, slack: usize) -> Result<Self::State> {
        let layout = crate::state::Dsv4StateLayout::new(&self.weights.config, slack);
        Ok(kvstate::HostState::new(layout.layout, capacity))
    }
    fn run(
        &self,
        st: &mut Self::State,
        tokens: &[u32],
        which: Logits,
        tap_layers: &[usize],
    ) -> Result<(Vec<f32>, Vec<f32>)> {
        if tap_layers.is_empty() {
            Ok((self.forward(st, tokens, which)?, Vec::new()))
        } else {
            self.forward_taps(st, tokens, which, tap_layers)
        }
    }
    fn rewind(&self, st: &mut Self::State, positions: usize) -> Result<()> {
        rewind_dsv4(&self.weights.config, st, positions)
    }
}

/// Rewind a DSV4 state (of either realization) to `positions`, with the
/// layout its ring slack (window rows beyond the window) implies.
fn rewind_dsv4(cfg: &crate::Dsv4Config, st: &mut dyn StateStore, positions: usize) -> Result<()> {
    let slack = st.rows(0) - cfg.sliding_window;
    crate::state::Dsv4StateLayout::new(cfg, slack).rewind(cfg, st, positions).map_err(|e| anyhow::anyhow!("{e}"))
}

impl Target for crate::gpu::Dsv4Gpu {
    type State = crate::gpu::GpuState;
    fn vocab(&self) -> usize {
        self.config.vocab_size
    }
    fn hidden(&self) -> usize {
        self.config.hidden_size
    }
    fn new_state(&self, capacity: usize, chunk: usize, slack: usize) -> Result<Self::State> {
        self.alloc_decode_state_with_slack(capacity, chunk, slack)
    }
    fn run(
        &self,
        st: &mut Self::State,
        tokens: &[u32],
        which: Logits,
        tap_layers: &[usize],
    ) -> Result<(Vec<f32>, Vec<f32>)> {
        if tap_layers.is_empty() {
            return Ok((self.forward(st, tokens, which)?, Vec::new()));
        }
        let (l, res) = self.forward_capture_layers(st, tokens, which, tap_layers)?;
        let (n, hc, d) = (tokens.len(), self.config.hc_mult, self.config.hidden_size);
        let taps = crate::cpu::ops::hc::stream_mean_taps(tap_layers, n, hc, d, |layer| &res[layer]);
        Ok((l, taps))
    }
    fn rewind(&self, st: &mut Self::State, positions: usize) -> Result<()> {
        rewind_dsv4(&self.config, st, positions)
    }
}

/// How many drafts each step verifies.
#[derive(Clone, Debug)]
pub enum Schedule {
    /// Always the drafts proposed, up to the ceiling.
    Fixed,
    /// Algorithm 1 over the drafts' confidences and the profiled SPS curve
    /// (`sps[b - 1]` = target steps per second at `b` tokens).
    Confidence { sps: Vec<f64> },
}

impl Schedule {
    /// Drafts to verify out of `conf.len()` proposed.
    pub fn length(&self, conf: &[f32]) -> usize {
        match self {
            Schedule::Fixed => conf.len(),
            Schedule::Confidence { sps } => {
                // expected tokens per pass (1 + the chance each draft
                // survives) times passes per second, over every prefix;
                // the shortest best wins ties
                let at = |b: usize| sps[(b - 1).min(sps.len() - 1)];
                let (mut a, mut tau, mut best, mut best_l) = (1.0f64, 1.0f64, at(1), 0usize);
                for (j, &c) in conf.iter().enumerate() {
                    a *= c.clamp(0.0, 1.0) as f64;
                    tau += a;
                    let theta = tau * at(j + 2);
                    if theta > best {
                        best = theta;
                        best_l = j + 1;
                    }
                }
                best_l
            }
        }
    }
}

/// Steps per second of the target at 1..=max_tokens tokens per pass (median
/// of `reps` passes each, on a scratch state).
pub fn profile_sps<T: Target>(t: &T, max_tokens: usize, reps: usize) -> Result<Vec<f64>> {
    let mut out = Vec::new();
    for b in 1..=max_tokens {
        let mut times = Vec::new();
        for _ in 0..reps.max(1) {
            // 32 warm positions in one chunk, then the timed pass of b tokens
            let mut st = t.new_state(32 + b, b.max(32), 0)?;
            let warm: Vec<u32> = (0..32 + b).map(|i| (i % (t.vocab() - 2)) as u32 + 2).collect();
            t.run(&mut st, &warm[..32], Logits::None, &[])?;
            let toks = &warm[32..32 + b];
            let s = Instant::now();
            t.run(&mut st, toks, Logits::All, &[])?;
            times.push(s.elapsed().as_secs_f64());
        }
        times.sort_by(f64::total_cmp);
        out.push(1.0 / times[times.len() / 2].max(1e-9));
    }
    Ok(out)
}

#[derive(Clone, Debug, Default)]
pub struct SpecStats {
    pub steps: usize,
    /// Per step: drafts accepted (bonus not counted).
    pub accepted: Vec<usize>,
    /// Per draft position (1-based index - 1): proposed-and-verified, accepted.
    pub verified_at: Vec<usize>,
    pub accepted_at: Vec<usize>,
    pub seconds: f64,
}

impl SpecStats {
    /// Tokens produced per verify step (accepted drafts + the bonus).
    pub fn mean_accepted(&self) -> f64 {
        if self.steps == 0 {
            return 0.0;
        }
        (self.accepted.iter().sum::<usize>() + self.steps) as f64 / self.steps as f64
    }
    /// Per draft position, the fraction of verified drafts accepted.
    pub fn acceptance_by_position(&self) -> Vec<f64> {
        self.verified_at
            .iter()
            .zip(&self.accepted_at)
            .map(|(&v, &a)| if v == 0 { 0.0 } else { a as f64 / v as f64 })
            .collect()
    }
}

pub struct SpecOptions {
    pub max_new: usize,
    pub stop: Option<u32>,
    /// Most drafts per step.
    pub ceiling: usize,
    pub schedule: Schedule,
    pub prefill_chunk: usize,
}

/// Greedy generation with a drafter. Returns the new tokens and statistics.
pub fn speculative_greedy<T: Target>(
    t: &T,
    drafter: &mut Drafter,
    prompt: &[u32],
    o: &SpecOptions,
) -> Result<(Vec<u32>, SpecStats)> {
    if prompt.is_empty() {
        bail!("the prompt is empty");
    }
    let slack = o.ceiling + 1;
    let cap = prompt.len() + o.max_new + slack + 1;
    let mut st = t.new_state(cap, o.prefill_chunk.max(slack), slack)?;
    let taps_of = drafter.tap_layers.clone();
    let started = Instant::now();
    let mut last = Vec::new();
    let mut taps = Vec::new();
    for c in prompt.chunks(o.prefill_chunk.max(1)) {
        let (l, tp) = t.run(&mut st, c, Logits::Last, &taps_of)?;
        last = l;
        taps.extend(tp);
    }
    drafter.commit(prompt, 0, &taps)?;
    let mut stats =
        SpecStats { verified_at: vec![0; o.ceiling], accepted_at: vec![0; o.ceiling], ..Default::default() };
    let mut out = Vec::with_capacity(o.max_new);
    let mut anchor = argmax(&last);
    out.push(anchor);
    let v = t.vocab();
    while out.len() < o.max_new && Some(anchor) != o.stop {
        let room = o.max_new - out.len();
        let (drafts, conf) = drafter.propose(anchor, o.ceiling.min(room))?;
        let l = o.schedule.length(&conf).min(drafts.len());
        let p = st.positions();
        let mut verify = vec![anchor];
        verify.extend_from_slice(&drafts[..l]);
        let (logits, tp) = t.run(&mut st, &verify, Logits::All, &taps_of)?;
        let mut j = 0;
        while j < l && drafts[j] == argmax(&logits[j * v..(j + 1) * v]) {
            j += 1;
        }
        let bonus = argmax(&logits[j * v..(j + 1) * v]);
        t.rewind(&mut st, p + j + 1)?;
        let tw = taps_of.len() * t.hidden();
        drafter.commit(&verify[..j + 1], p, &tp[..if tw == 0 { 0 } else { (j + 1) * tw }])?;
        for k in 0..l {
            stats.verified_at[k] += 1;
            if k < j {
                stats.accepted_at[k] += 1;
            }
        }
        stats.steps += 1;
        stats.accepted.push(j);
        for &d in &drafts[..j] {
            out.push(d);
            if Some(d) == o.stop {
                break;
            }
        }
        if out.last().copied() == o.stop {
            break;
        }
        out.push(bonus);
        anchor = bonus;
    }
    out.truncate(o.max_new);
    if let Some(s) = o.stop {
        if let Some(i) = out.iter().position(|&x| x == s) {
            out.truncate(i + 1);
        }
    }
    stats.seconds = started.elapsed().as_secs_f64();
    Ok((out, stats))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;
    use std::sync::Arc;

    /// A target that enforces the GPU's contract: a state allocated for
    /// chunks of `c` tokens refuses wider runs, and capacity is checked.
    struct Strict {
        chunk: Cell<usize>,
    }

    impl Target for Strict {
        type State = kvstate::HostState;
        fn vocab(&self) -> usize {
            8
        }
        fn hidden(&self) -> usize {
            4
        }
        fn new_state(&self, capacity: usize, chunk: usize, _slack: usize) -> Result<Self::State> {
            self.chunk.set(chunk);
            let l = kvstate::Layout::new(vec![kvstate::ClassSpec::new(
                "kv",
                1,
                kvstate::ElemType::F32,
                kvstate::CapacityRule::Grows { positions_per_row: 1 },
            )])
            .unwrap();
            Ok(kvstate::HostState::new(Arc::new(l), capacity))
        }
        fn run(&self, st: &mut Self::State, tokens: &[u32], _: Logits, _: &[usize]) -> Result<(Vec<f32>, Vec<f32>)> {
            if tokens.len() > self.chunk.get() {
                bail!("chunk of {} tokens is wider than this state's scratch ({})", tokens.len(), self.chunk.get());
            }
            if st.positions() + tokens.len() > st.capacity() {
                bail!("capacity {} exceeded", st.capacity());
            }
            st.set_positions(st.positions() + tokens.len());
            Ok((vec![0.0; tokens.len() * 8], Vec::new()))
        }
        fn rewind(&self, st: &mut Self::State, positions: usize) -> Result<()> {
            st.set_positions(positions);
            Ok(())
        }
    }

    #[test]
    fn profiling_respects_the_chunk_contract_at_every_width() {
        let t = Strict { chunk: Cell::new(0) };
        for ceiling in [1, 5, 40] {
            let sps = profile_sps(&t, ceiling + 1, 2).unwrap();
            assert_eq!(sps.len(), ceiling + 1);
            assert!(sps.iter().all(|&x| x > 0.0 && x.is_finite()));
        }
    }

    #[test]
    fn the_schedule_trades_expected_acceptance_against_speed() {
        let conf = [0.9f32, 0.8, 0.5, 0.1];
        assert_eq!(Schedule::Fixed.length(&conf), 4);
        // speed independent of width: every draft with positive confidence pays
        let flat = Schedule::Confidence { sps: vec![100.0; 5] };
        assert_eq!(flat.length(&conf), 4);
        assert_eq!(flat.length(&[0.9, 0.0, 0.9]), 1, "a zero confidence ends the prefix");
        // passes slow down fast: verifying nothing beats every prefix
        let steep = Schedule::Confidence { sps: vec![100.0, 40.0, 30.0, 20.0, 10.0] };
        assert_eq!(steep.length(&conf), 0);
        // the best prefix may lie beyond one that does not pay on its own
        let dip = Schedule::Confidence { sps: vec![100.0, 50.0, 49.0, 48.0, 47.0] };
        assert_eq!(dip.length(&[1.0, 1.0, 1.0]), 3);
        assert_eq!(dip.length(&conf), 3);
        let mild = Schedule::Confidence { sps: vec![100.0, 95.0, 90.0, 75.0, 60.0] };
        assert_eq!(mild.length(&conf), 2);
    }
}
