//! The DSpark drafter on the CPU (the reference realization).
//!
//! Three stages, each a DSV4 block with window-only attention and
//! score-routed MoE. The tap: for every committed position, the trunk's
//! last layers' outputs (means over the hyper-connection streams,
//! concatenated) go through `main_proj` and `main_norm` to `main_x`; each
//! stage writes `kv_norm(wkv(main_x))`, rotated at the position, into its
//! own ring of `sliding_window` rows. A proposal runs the block
//! `[anchor, noise, ...]` at the next positions through the stages at once:
//! queries see the ring (the last committed positions) and every block key
//! (attention is bidirectional inside the block). Then the last stage's
//! hc_head and norm, the trunk's LM head, the Markov bias and the
//! confidence head (markov.rs).

use std::path::Path;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use kvstate::{CapacityRule, ClassSpec, ElemType, HostState, Layout, StateStore};

use trunk::config::{AttnKind, DsparkConfig, Dsv4Config, MlpKind};
use trunk::cpu::ops::attention::{attend, grouped_output, project_qkv};
use trunk::cpu::ops::hc::{collapse, hc_head, hc_post, hc_pre};
use trunk::cpu::ops::linear::linear;
use trunk::cpu::ops::moe::{moe_forward, MoeArm};
use trunk::cpu::ops::norm::rms_norm;
use trunk::cpu::ops::rope::Rope;
use trunk::cpu::Variant;
use trunk::weights::matrix::Matrix;
use trunk::weights::model::{load_block, load_floats, load_matrix, HcWeights, LayerWeights};
use trunk::weights::safetensors::SafetensorsDir;
use trunk::weights::tensor::TensorSource;
use trunk::weights::CheckpointLayout;

pub struct DsparkWeights {
    pub cfg: Dsv4Config,
    pub ds: DsparkConfig,
    pub embed: Matrix,
    pub head: Matrix,
    pub main_proj: Matrix,
    pub main_norm: Vec<f32>,
    pub stages: Vec<LayerWeights>,
    pub norm: Vec<f32>,
    pub hc_head: HcWeights,
    /// `[vocab, rank]`: the Markov embedding of the previous token.
    pub markov_w1: Matrix,
    /// `[vocab, rank]`: bias logits `w2 . e`.
    pub markov_w2: Matrix,
    /// `[hidden + rank]`
    pub confidence: Vec<f32>,
}

impl DsparkWeights {
    /// The drafter stored in a checkpoint directory (official names, `mtp.*`),
    /// or generated for a `synth:` address with `dspark`. Reads the config,
    /// the shared embedding and head, and the `mtp.*` tensors; nothing of
    /// the trunk's layers.
    pub fn load(dir: &Path) -> Result<DsparkWeights> {
        if let Some(addr) = dir.to_str().and_then(|d| d.strip_prefix("synth:")) {
            let (s, _) = trunk::model::parse_synth_address(addr)?;
            let keep = |n: &str| n.starts_with("mtp.") || n == "embed.weight" || n == "head.weight";
            let src = trunk::synth::write::MemSource::official_only(&s, &keep)?;
            return Self::from_source(&src, s.config, &format!("synth:{addr}"));
        }
        let cfg = Dsv4Config::from_hf_file(&dir.join("config.json"))?;
        let src = SafetensorsDir::open(dir)?;
        Self::from_source(&src, cfg, &dir.display().to_string())
    }

    fn from_source(src: &dyn TensorSource, cfg: Dsv4Config, origin: &str) -> Result<DsparkWeights> {
        cfg.validate()?;
        let ds = cfg
            .dspark
            .clone()
            .with_context(|| format!("{origin}: the config has no DSpark drafter (dspark_* keys)"))?;
        let lay = CheckpointLayout::Official;
        let (d, v, r) = (cfg.hidden_size, cfg.vocab_size, ds.markov_rank);
        let last = format!("mtp.{}", ds.stages - 1);
        let stages = (0..ds.stages)
            .map(|s| load_block(src, lay, &cfg, &format!("mtp.{s}"), AttnKind::Window, MlpKind::Score))
            .collect::<Result<Vec<_>>>()?;
        Ok(DsparkWeights {
            main_proj: load_matrix(src, lay, "mtp.0.main_proj", d, ds.target_layer_ids.len() * d)?,
            main_norm: load_floats(src, lay, "mtp.0.main_norm", &[d])?,
            norm: load_floats(src, lay, &format!("{last}.norm"), &[d])?,
            hc_head: HcWeights {
                fn_: load_floats(src, lay, &format!("{last}.hc_head_fn"), &[cfg.hc_mult, cfg.hc_mult * d])?,
                base: load_floats(src, lay, &format!("{last}.hc_head_base"), &[cfg.hc_mult])?,
                scale: load_floats(src, lay, &format!("{last}.hc_head_scale"), &[1])?,
            },
            markov_w1: load_matrix(src, lay, &format!("{last}.markov_head.markov_w1"), v, r)?,
            markov_w2: load_matrix(src, lay, &format!("{last}.markov_head.markov_w2"), v, r)?,
            confidence: load_floats(src, lay, &format!("{last}.confidence_head.proj"), &[1, d + r])?,
            embed: load_matrix(src, lay, "embed", v, d)?,
            head: load_matrix(src, lay, "head", v, d)?,
            stages,
            cfg,
            ds,
        })
    }

    /// The drafter's decode state: one ring of K=V rows per stage.
    pub fn layout(&self, slack: usize) -> Layout {
        Layout::new(
            (0..self.ds.stages)
                .map(|s| {
                    ClassSpec::new(
                        format!("stage{s}.ring"),
                        self.cfg.head_dim,
                        ElemType::F32,
                        CapacityRule::Ring { rows: self.cfg.sliding_window + slack },
                    )
                })
                .collect(),
        )
        .expect("distinct stage names")
    }
}

/// What a proposal computed, for inspection (`forward_spec` capture).
#[derive(Clone, Debug, Default)]
pub struct Capture {
    /// The last commit's tapped rows (`[n, taps x hidden]`) and their
    /// `main_x` (`[n, hidden]`, after `main_proj` and `main_norm`).
    pub main_hidden: Vec<f32>,
    pub main_x: Vec<f32>,
    /// Per stage: the residual streams after the stage `[block, hc, hidden]`.
    pub block_outputs: Vec<Vec<f32>>,
    pub block_tokens: Vec<u32>,
    /// Per slot: the collapsed pre-norm hidden `[block, hidden]`.
    pub collapsed: Vec<f32>,
    /// Logits before and after the Markov bias `[block, vocab]`.
    pub logits_base: Vec<f32>,
    pub logits_markov: Vec<f32>,
    /// Markov embeddings of the previous tokens `[block, rank]`.
    pub markov_embed: Vec<f32>,
}

/// What the stages computed for one block.
pub struct Backbone {
    /// `[anchor, noise, ...]`
    pub tokens: Vec<u32>,
    /// Per slot, the pre-norm collapsed hidden `[block, hidden]`.
    pub collapsed: Vec<f32>,
    /// Each stage's output streams `[block, hc, hidden]`.
    pub outputs: Vec<Vec<f32>>,
}

pub struct Dspark {
    pub w: Arc<DsparkWeights>,
    pub variant: Variant,
    /// How the stages' MoE runs; both arms give identical bits.
    pub moe: MoeArm,
    pub state: HostState,
    rope: Rope,
    /// The last commit's taps and `main_x`, for `forward_spec`'s capture.
    last_commit: (Vec<f32>, Vec<f32>),
}

impl Dspark {
    pub fn new(w: Arc<DsparkWeights>, variant: Variant, capacity: usize) -> Dspark {
        let rope = Rope::main(&w.cfg);
        let state = HostState::new(Arc::new(w.layout(0)), capacity);
        Dspark { w, variant, moe: MoeArm::Fused, state, rope, last_commit: Default::default() }
    }

    /// Taps per committed row: `target_layer_ids.len() * hidden` floats.
    pub fn tap_width(&self) -> usize {
        self.w.ds.target_layer_ids.len() * self.w.cfg.hidden_size
    }

    /// The target consumed `n = taps.len() / tap_width` positions starting at
    /// `pos0`: write every stage's ring row for each.
    pub fn commit(&mut self, pos0: usize, taps: &[f32]) -> Result<()> {
        let (d, hd, rd) = (self.w.cfg.hidden_size, self.w.cfg.head_dim, self.w.cfg.rope_dim);
        let tw = self.tap_width();
        if tw == 0 || !taps.len().is_multiple_of(tw) {
            bail!("DSpark: {} tap values are not whole rows of {tw}", taps.len());
        }
        if pos0 != self.state.positions() {
            bail!("DSpark: commit at position {pos0}, the drafter is at {}", self.state.positions());
        }
        let n = taps.len() / tw;
        if pos0 + n > self.state.capacity() {
            bail!(
                "DSpark: committing {n} positions at {pos0} exceeds the drafter's capacity {}",
                self.state.capacity()
            );
        }
        let v = self.variant;
        let mut main_x = linear(&v.act(taps, tw), n, &self.w.main_proj);
        rms_norm(&mut main_x, d, Some(&self.w.main_norm), self.w.cfg.rms_norm_eps as f32);
        let mq = v.act(&main_x, d);
        // every row is computed before any is written: a failed commit leaves the state as it was
        let rows: Vec<Vec<f32>> = self
            .w
            .stages
            .iter()
            .map(|st| {
                let mut kv = linear(&mq, n, &st.attn.wkv);
                rms_norm(&mut kv, hd, Some(&st.attn.kv_norm), self.w.cfg.rms_norm_eps as f32);
                for (i, row) in kv.chunks_mut(hd).enumerate() {
                    self.rope.apply(row, pos0 + i, false);
                    v.kv(row, rd);
                }
                kv
            })
            .collect();
        for (s, kv) in rows.iter().enumerate() {
            for row in kv.chunks(hd) {
                self.state.push_row_f32(s, row)?;
            }
        }
        self.state.set_positions(pos0 + n);
        self.last_commit = (taps.to_vec(), main_x);
        Ok(())
    }

    /// The last commit's taps and `main_x` (empty before the first commit).
    pub fn last_commit(&self) -> (&[f32], &[f32]) {
        (&self.last_commit.0, &self.last_commit.1)
    }

    /// Run the block after `anchor` through the stages.
    pub fn backbone(&self, anchor: u32) -> Result<Backbone> {
        let cfg = &self.w.cfg;
        let (d, hc, nh, hd) = (cfg.hidden_size, cfg.hc_mult, cfg.num_attention_heads, cfg.head_dim);
        let g = self.w.ds.block_size;
        let p0 = self.state.positions();
        let mut tokens = vec![self.w.ds.noise_token_id; g];
        tokens[0] = anchor;
        let positions: Vec<usize> = (p0..p0 + g).collect();
        let (eps, hc_eps) = (cfg.rms_norm_eps as f32, cfg.hc_eps as f32);
        let mut x = vec![0.0f32; g * hc * d];
        let mut row = vec![0.0f32; d];
        for (i, &t) in tokens.iter().enumerate() {
            self.w.embed.decode_row(t as usize, &mut row);
            for j in 0..hc {
                x[(i * hc + j) * d..(i * hc + j + 1) * d].copy_from_slice(&row);
            }
        }
        let win = cfg.sliding_window.min(p0);
        let mut outputs = Vec::with_capacity(self.w.stages.len());
        for (s, st) in self.w.stages.iter().enumerate() {
            let mixes: Vec<_> = (0..g)
                .map(|i| hc_pre(&st.hc_attn, &x[i * hc * d..(i + 1) * hc * d], hc, cfg.hc_sinkhorn_iters, hc_eps, eps))
                .collect();
            let mut h: Vec<f32> =
                (0..g).flat_map(|i| collapse(&mixes[i].pre, &x[i * hc * d..(i + 1) * hc * d], d)).collect();
            rms_norm(&mut h, d, Some(&st.attn_norm), eps);
            let qkv = project_qkv(cfg, &st.attn, &h, &positions, &self.rope, self.variant);
            // every slot sees the last committed rows and the whole block
            let mut keys: Vec<&[f32]> = (p0 - win..p0).map(|p| self.state.row_f32(s, p as u64)).collect();
            keys.extend(qkv.kv.chunks(hd));
            let scale = 1.0 / (hd as f64).sqrt();
            let mut out = vec![0.0f32; g * nh * hd];
            for i in 0..g {
                let mut o = attend(&qkv.q[i * nh * hd..(i + 1) * nh * hd], &keys, &st.attn.sink, hd, scale);
                for head in o.chunks_mut(hd) {
                    self.rope.apply(head, positions[i], true);
                }
                out[i * nh * hd..(i + 1) * nh * hd].copy_from_slice(&o);
            }
            let a = grouped_output(cfg, &st.attn, &out, g, self.variant);
            for i in 0..g {
                hc_post(&mixes[i], &a[i * d..(i + 1) * d], &mut x[i * hc * d..(i + 1) * hc * d], d);
            }
            let mixes: Vec<_> = (0..g)
                .map(|i| hc_pre(&st.hc_ffn, &x[i * hc * d..(i + 1) * hc * d], hc, cfg.hc_sinkhorn_iters, hc_eps, eps))
                .collect();
            let mut h: Vec<f32> =
                (0..g).flat_map(|i| collapse(&mixes[i].pre, &x[i * hc * d..(i + 1) * hc * d], d)).collect();
            rms_norm(&mut h, d, Some(&st.ffn_norm), eps);
            let (m, _) = moe_forward(cfg, &st.ffn, &h, &tokens, self.variant, self.moe);
            for i in 0..g {
                hc_post(&mixes[i], &m[i * d..(i + 1) * d], &mut x[i * hc * d..(i + 1) * hc * d], d);
            }
            outputs.push(x.clone());
        }
        let collapsed: Vec<f32> =
            (0..g).flat_map(|i| hc_head(&self.w.hc_head, &x[i * hc * d..(i + 1) * hc * d], d, hc_eps, eps)).collect();
        Ok(Backbone { tokens, collapsed, outputs })
    }
}
