//! The park/restore gate. A warmed state (prefill of 66 ids + 17 greedy
//! steps, crossing several compressor windows) is snapshotted to host
//! memory, restored into a capacity 97 positions larger, and parked to disk
//! and loaded into a third state; every class must match bit for bit, and
//! 11 more greedy steps must give bit-identical logits on all three with
//! identical classes at the end. It also re-checks that chunked prefill at
//! widths 1 and 64 leaves identical classes.

use std::path::Path;
use std::time::Instant;

use anyhow::{anyhow, bail, Result};
use kvstate::{restore, snapshot_with, HostBytes, Identity, Snapshot, StateStore};
use serde::Serialize;

use kvstate::Joint;
use trunk::drafter::{Drafter, DrafterPlugin, DrafterSetup};
use trunk::generate::argmax;
use trunk::speculative::Target;

/// An engine whose decode state lives in kvstate classes.
pub trait CacheEngine {
    type State: StateStore;
    type Host: HostBytes;
    fn alloc(&self, capacity: usize, chunk: usize) -> Result<Self::State>;
    /// Prefill `tokens` in chunks of `chunk`; logits of the last position.
    fn prefill(&self, st: &mut Self::State, tokens: &[u32], chunk: usize) -> Result<Vec<f32>>;
    fn step(&self, st: &mut Self::State, token: u32) -> Result<Vec<f32>>;
    /// Host memory for a snapshot of `bytes` (page-locked on a GPU).
    fn host(&self, bytes: usize) -> Result<Self::Host>;
    fn identity(&self) -> Identity;
    fn describe(&self) -> String;
    /// A snapshot of every class's live rows.
    fn snapshot(&self, st: &Self::State) -> Result<Snapshot<Self::Host>> {
        let mut err = None;
        let s = snapshot_with(st, |n| match self.host(n) {
            Ok(h) => h,
            Err(x) => {
                err = Some(x);
                self.host(0).expect("an empty host buffer")
            }
        })
        .map_err(|x| anyhow!("{x}"))?;
        match err {
            Some(x) => Err(x),
            None => Ok(s),
        }
    }
    /// Restore into an equal or larger state.
    fn restore(&self, s: &Snapshot<Self::Host>, st: &mut Self::State) -> Result<()> {
        restore(s, st).map_err(|x| anyhow!("{x}"))
    }
}

/// A deliberate fault for the gate's teeth: flip one bit of one class in
/// the snapshot before it is restored.
#[derive(Clone, Copy, Debug)]
pub struct FlipBit {
    pub class: usize,
    pub byte: usize,
}

#[derive(Clone, Debug, Serialize)]
pub struct HostCacheReport {
    pub engine: String,
    pub positions_warmed: usize,
    pub snapshot_bytes: usize,
    pub snapshot_seconds: f64,
    pub restore_seconds: f64,
    pub park_bytes: u64,
    pub restored_classes_identical: bool,
    pub parked_classes_identical: bool,
    pub differing_classes: Vec<String>,
    pub continuation_steps: usize,
    pub continuation_logits_identical: bool,
    pub final_classes_identical: bool,
    pub chunk_widths_identical: bool,
    pub pass: bool,
}

fn snap<E: CacheEngine>(e: &E, st: &E::State) -> Result<Snapshot<E::Host>> {
    e.snapshot(st)
}

/// Run the gate on `ids` (at least 66) with the park file under `dir`.
pub fn host_cache_gate<E: CacheEngine>(
    e: &E,
    ids: &[u32],
    dir: &Path,
    fault: Option<FlipBit>,
) -> Result<HostCacheReport> {
    const PREFILL: usize = 66;
    const WARM_STEPS: usize = 17;
    const MORE: usize = 11;
    const GROW: usize = 97;
    if ids.len() < PREFILL {
        bail!("the host-cache gate needs at least {PREFILL} token ids, got {}", ids.len());
    }
    let cap = PREFILL + WARM_STEPS + MORE;
    let mut a = e.alloc(cap, 64)?;
    let mut logits = e.prefill(&mut a, &ids[..PREFILL], 64)?;
    for _ in 0..WARM_STEPS {
        logits = e.step(&mut a, argmax(&logits))?;
    }
    let t = Instant::now();
    let mut s = snap(e, &a)?;
    let snapshot_seconds = t.elapsed().as_secs_f64();
    let snapshot_bytes = s.bytes();
    // park the faithful snapshot before any fault touches the in-memory one
    let path = dir.join("host_cache_gate.kvstate");
    kvstate::write_snapshot(&path, &s, &e.identity()).map_err(|x| anyhow!("{x}"))?;
    let park_bytes = std::fs::metadata(&path)?.len();
    if let Some(f) = fault {
        let b = s.classes[f.class].bytes.as_mut();
        let i = f.byte % b.len().max(1);
        b[i] ^= 1;
    }
    let mut b = e.alloc(cap + GROW, 64)?;
    let t = Instant::now();
    e.restore(&s, &mut b)?;
    let restore_seconds = t.elapsed().as_secs_f64();
    let sa = snap(e, &a)?;
    let sb = snap(e, &b)?;
    let mut differing = sa.differing_classes(&sb);
    let restored_same = differing.is_empty();
    let mut c = e.alloc(cap + GROW, 64)?;
    kvstate::unpark(&path, &e.identity(), &mut c).map_err(|x| anyhow!("{x}"))?;
    let sc = snap(e, &c)?;
    let parked_diff = sa.differing_classes(&sc);
    let parked_same = parked_diff.is_empty();
    differing.extend(parked_diff.into_iter().map(|n| format!("parked:{n}")));
    // continue on all three
    let (mut la, mut lb, mut lc) = (logits.clone(), logits.clone(), logits);
    let mut same_logits = true;
    for _ in 0..MORE {
        let (ta, tb, tc) = (argmax(&la), argmax(&lb), argmax(&lc));
        la = e.step(&mut a, ta)?;
        lb = e.step(&mut b, tb)?;
        lc = e.step(&mut c, tc)?;
        same_logits &= la == lb && la == lc;
    }
    let (fa, fb, fc) = (snap(e, &a)?, snap(e, &b)?, snap(e, &c)?);
    let final_same = fa.differing_classes(&fb).is_empty() && fa.differing_classes(&fc).is_empty();
    // chunked prefill leaves the same classes at widths 1 and 64
    let mut w1 = e.alloc(PREFILL, 1)?;
    e.prefill(&mut w1, &ids[..PREFILL], 1)?;
    let mut w64 = e.alloc(PREFILL, 64)?;
    e.prefill(&mut w64, &ids[..PREFILL], 64)?;
    let chunks_same = snap(e, &w1)?.differing_classes(&snap(e, &w64)?).is_empty();
    let pass = restored_same && parked_same && same_logits && final_same && chunks_same;
    Ok(HostCacheReport {
        engine: e.describe(),
        positions_warmed: PREFILL + WARM_STEPS,
        snapshot_bytes,
        snapshot_seconds,
        restore_seconds,
        park_bytes,
        restored_classes_identical: restored_same,
        parked_classes_identical: parked_same,
        differing_classes: differing,
        continuation_steps: MORE,
        continuation_logits_identical: same_logits,
        final_classes_identical: final_same,
        chunk_widths_identical: chunks_same,
        pass,
    })
}

/// The CPU oracle as a cache engine.
pub struct CpuEngine<'a> {
    pub oracle: &'a trunk::cpu::CpuOracle,
    pub identity: Identity,
}

impl CacheEngine for CpuEngine<'_> {
    type State = kvstate::HostState;
    type Host = Vec<u8>;
    fn alloc(&self, capacity: usize, _chunk: usize) -> Result<Self::State> {
        Ok(self.oracle.new_state(capacity))
    }
    fn prefill(&self, st: &mut Self::State, tokens: &[u32], chunk: usize) -> Result<Vec<f32>> {
        let mut last = Vec::new();
        for c in tokens.chunks(chunk.max(1)) {
            last = self.oracle.forward(st, c, trunk::cpu::Logits::Last)?;
        }
        Ok(last)
    }
    fn step(&self, st: &mut Self::State, token: u32) -> Result<Vec<f32>> {
        self.oracle.forward(st, &[token], trunk::cpu::Logits::Last)
    }
    fn host(&self, bytes: usize) -> Result<Vec<u8>> {
        Ok(vec![0u8; bytes])
    }
    fn identity(&self) -> Identity {
        self.identity.clone()
    }
    fn describe(&self) -> String {
        format!("cpu/{}", self.oracle.variant)
    }
}

/// The GPU forward as a cache engine (snapshots in page-locked memory).
pub struct GpuEngine<'a> {
    pub gpu: &'a trunk::gpu::Dsv4Gpu,
    pub identity: Identity,
}

impl CacheEngine for GpuEngine<'_> {
    type State = trunk::gpu::GpuState;
    type Host = kvstate::PinnedBytes;
    fn alloc(&self, capacity: usize, chunk: usize) -> Result<Self::State> {
        self.gpu.alloc_decode_state_for_transient(capacity, chunk)
    }
    fn prefill(&self, st: &mut Self::State, tokens: &[u32], chunk: usize) -> Result<Vec<f32>> {
        self.gpu.prefill_with_cache_chunked(st, tokens, chunk, trunk::cpu::Logits::Last)
    }
    fn step(&self, st: &mut Self::State, token: u32) -> Result<Vec<f32>> {
        self.gpu.decode_step(st, token)
    }
    fn host(&self, bytes: usize) -> Result<kvstate::PinnedBytes> {
        kvstate::PinnedBytes::new(self.gpu.context(), bytes).map_err(|e| anyhow!("{e}"))
    }
    fn identity(&self) -> Identity {
        self.identity.clone()
    }
    fn describe(&self) -> String {
        format!("gpu/{} devices {:?}", self.gpu.opts.variant, self.gpu.devices())
    }
    fn snapshot(&self, st: &Self::State) -> Result<Snapshot<kvstate::PinnedBytes>> {
        let mut s = st.kv.pinned_snapshot_buffers(self.gpu.context()).map_err(|e| anyhow!("{e}"))?;
        st.kv.read_into(&mut s).map_err(|e| anyhow!("{e}"))?;
        Ok(s)
    }
    fn restore(&self, s: &Snapshot<kvstate::PinnedBytes>, st: &mut Self::State) -> Result<()> {
        st.kv.restore_bulk(s).map_err(|e| anyhow!("{e}"))
    }
}

/// A target with a drafter plugin riding along: the state is the joint of
/// the target's classes (`trunk/...`) and the drafter's (`drafter/...`), and
/// every consumed token's taps are committed to the drafter, as speculative
/// decoding does. The gate then covers the drafter's rings as well.
pub struct DraftedEngine<'a, T: Target> {
    pub target: &'a T,
    pub plugin: std::sync::Arc<DrafterPlugin>,
    pub model_dir: std::path::PathBuf,
    pub options_json: Option<String>,
    /// The device the drafter is told the target runs on (None: CPU).
    pub device: Option<usize>,
    pub identity: Identity,
    pub label: String,
}

impl<T: Target> DraftedEngine<'_, T> {
    fn feed(&self, st: &mut Joint<T::State, Drafter>, tokens: &[u32], chunk: usize) -> Result<Vec<f32>> {
        let layers = st.second.tap_layers.clone();
        let mut last = Vec::new();
        for c in tokens.chunks(chunk.max(1)) {
            let pos0 = st.first.positions();
            let (logits, taps) = self.target.run(&mut st.first, c, trunk::cpu::Logits::Last, &layers)?;
            st.second.commit(c, pos0, &taps)?;
            last = logits;
        }
        Ok(last)
    }
}

impl<T: Target> CacheEngine for DraftedEngine<'_, T> {
    type State = Joint<T::State, Drafter>;
    type Host = Vec<u8>;
    fn alloc(&self, capacity: usize, chunk: usize) -> Result<Self::State> {
        let setup = DrafterSetup {
            vocab_size: self.target.vocab(),
            hidden_size: self.target.hidden(),
            max_positions: capacity,
            model_dir: Some(&self.model_dir),
            options_json: self.options_json.as_deref(),
            embed_f32: None,
            head_f32: None,
            device: self.device,
        };
        let drafter = Drafter::new(self.plugin.clone(), &setup)?;
        let trunk = self.target.new_state(capacity, chunk, 0)?;
        Joint::new(("trunk", "drafter"), trunk, drafter).map_err(|e| anyhow!("{e}"))
    }
    fn prefill(&self, st: &mut Self::State, tokens: &[u32], chunk: usize) -> Result<Vec<f32>> {
        self.feed(st, tokens, chunk)
    }
    fn step(&self, st: &mut Self::State, token: u32) -> Result<Vec<f32>> {
        self.feed(st, &[token], 1)
    }
    fn host(&self, bytes: usize) -> Result<Vec<u8>> {
        Ok(vec![0u8; bytes])
    }
    fn identity(&self) -> Identity {
        let mut id = self.identity.clone();
        id.insert("drafter".into(), self.plugin.name.clone());
        id
    }
    fn describe(&self) -> String {
        format!("{} + drafter {}", self.label, self.plugin.name)
    }
}

/// The identity a DSV4 state is parked under.
pub fn dsv4_identity(config: &trunk::Dsv4Config, weights_sha256: &str, variant: trunk::cpu::Variant) -> Identity {
    let mut id = Identity::new();
    id.insert("model".into(), "deepseek_v4".into());
    id.insert("config_sha256".into(), config.fingerprint());
    id.insert("weights_sha256".into(), weights_sha256.into());
    id.insert("variant".into(), variant.to_string());
    id
}
