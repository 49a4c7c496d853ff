//! Two instances of one drafter plugin, with different options (DSpark's
//! GPU realization against its CPU reference), fed the same taps along the
//! target's greedy trajectory: every proposal's ids must be equal and the
//! confidences within a tolerance.
//!
//! The realizations this gate compares are exact twins (the GPU kernels
//! compute what their CPU twins do, in the same order), so the ids carry no
//! band: any differing id fails. The confidence tolerance defaults to 1e-6
//! absolute (a sigmoid in f32 of an f64 dot product; twins give 0), and the
//! report carries the largest difference seen.

use std::sync::Arc;

use anyhow::{bail, Result};
use serde::Serialize;

use trunk::cpu::Logits;
use trunk::drafter::{Drafter, DrafterPlugin, DrafterSetup};
use trunk::generate::argmax;
use trunk::speculative::Target;

/// Default absolute tolerance on confidences.
pub const CONF_TOLERANCE: f64 = 1e-6;

#[derive(Clone, Debug, Serialize)]
pub struct DrafterAgreement {
    pub reference_options: String,
    pub candidate_options: String,
    pub prompt_tokens: usize,
    pub proposals: usize,
    pub slots: usize,
    pub ids_equal: usize,
    /// (proposal, slot, reference id, candidate id) of the first differing id.
    pub first_difference: Option<(usize, usize, u32, u32)>,
    pub max_conf_abs_diff: f64,
    pub conf_tolerance: f64,
    /// Mean over proposals of the reference's drafts that the target's
    /// greedy trajectory confirms (a sanity figure, not a criterion).
    pub reference_mean_confirmed: f64,
    pub pass: bool,
}

/// Run `steps` proposals of both instances after a prefill of `prompt`.
#[allow(clippy::too_many_arguments)]
pub fn compare_drafters<T: Target>(
    target: &T,
    plugin: Arc<DrafterPlugin>,
    setup: &DrafterSetup,
    reference_options: &str,
    candidate_options: &str,
    prompt: &[u32],
    steps: usize,
    conf_tolerance: f64,
) -> Result<DrafterAgreement> {
    if prompt.is_empty() || steps == 0 {
        bail!("the drafter comparison needs a prompt and at least one step");
    }
    let make = |opts: &str| {
        let s = DrafterSetup { options_json: Some(opts), ..*setup };
        Drafter::new(plugin.clone(), &s)
    };
    let (mut a, mut b) = (make(reference_options)?, make(candidate_options)?);
    if a.tap_layers != b.tap_layers {
        bail!("the two instances tap different layers: {:?} and {:?}", a.tap_layers, b.tap_layers);
    }
    let layers = a.tap_layers.clone();
    let mut st = target.new_state(setup.max_positions, 64, 0)?;
    let mut last = Vec::new();
    let mut pos = 0;
    for c in prompt.chunks(64) {
        let (logits, taps) = target.run(&mut st, c, Logits::Last, &layers)?;
        a.commit(c, pos, &taps)?;
        b.commit(c, pos, &taps)?;
        pos += c.len();
        last = logits;
    }
    let mut next = argmax(&last);
    let mut rep = DrafterAgreement {
        reference_options: reference_options.into(),
        candidate_options: candidate_options.into(),
        prompt_tokens: prompt.len(),
        proposals: 0,
        slots: 0,
        ids_equal: 0,
        first_difference: None,
        max_conf_abs_diff: 0.0,
        conf_tolerance,
        reference_mean_confirmed: 0.0,
        pass: false,
    };
    let mut drafts: Vec<Vec<u32>> = Vec::new();
    let mut trajectory = Vec::new();
    for step in 0..steps {
        if pos + 8 >= setup.max_positions {
            bail!("{} positions leave no room for step {step} (max_positions {})", pos, setup.max_positions);
        }
        let (ia, ca) = a.propose(next, 16)?;
        let (ib, cb) = b.propose(next, 16)?;
        if ia.len() != ib.len() {
            bail!("proposal {step}: the reference drafted {} tokens, the candidate {}", ia.len(), ib.len());
        }
        for k in 0..ia.len() {
            rep.slots += 1;
            if ia[k] == ib[k] {
                rep.ids_equal += 1;
            } else if rep.first_difference.is_none() {
                rep.first_difference = Some((step, k, ia[k], ib[k]));
            }
            rep.max_conf_abs_diff = rep.max_conf_abs_diff.max((ca[k] as f64 - cb[k] as f64).abs());
        }
        rep.proposals += 1;
        drafts.push(ia);
        trajectory.push(next);
        let (logits, taps) = target.run(&mut st, &[next], Logits::Last, &layers)?;
        a.commit(&[next], pos, &taps)?;
        b.commit(&[next], pos, &taps)?;
        pos += 1;
        next = argmax(&logits);
    }
    trajectory.push(next);
    // drafts of proposal i continue trajectory[i]: confirmed while they match trajectory[i+1..]
    let confirmed: usize = drafts
        .iter()
        .enumerate()
        .map(|(i, d)| d.iter().zip(&trajectory[i + 1..]).take_while(|(x, y)| x == y).count())
        .sum();
    rep.reference_mean_confirmed = confirmed as f64 / rep.proposals as f64;
    rep.pass = rep.ids_equal == rep.slots && rep.max_conf_abs_diff <= conf_tolerance;
    Ok(rep)
}
