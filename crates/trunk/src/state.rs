//! The DSV4 decode state as `kvstate` cache classes.
//!
//! Per layer `l` (names `layer{l:02}.<class>`):
//! - `kv`: ring of the last `sliding_window (+ slack)` K=V rows (`head_dim`).
//! - `comp.pending` (CSA/HCA): ring of raw compressor rows `[kv | gate]`
//!   (`2 * width`): `2 * ratio` rows for CSA (the overlap needs the previous
//!   window), `ratio` for HCA.
//! - `comp.entries` (CSA/HCA): one compressed row (`head_dim`) per `ratio`
//!   positions.
//! - `idx.pending`, `idx.entries` (CSA): the same for the indexer at
//!   `index_head_dim`.
//!
//! `slack` extra ring rows let speculative decoding roll back up to `slack`
//! positions without losing a live row.

use std::sync::Arc;

use kvstate::{CapacityRule, ClassSpec, ElemType, Layout};

use crate::config::{AttnKind, Dsv4Config};

/// Class indices of one layer.
#[derive(Clone, Copy, Debug)]
pub struct LayerClasses {
    pub kv: usize,
    pub comp_pending: Option<usize>,
    pub comp_entries: Option<usize>,
    pub idx_pending: Option<usize>,
    pub idx_entries: Option<usize>,
}

/// The state layout of a config, with class indices per layer.
#[derive(Clone, Debug)]
pub struct Dsv4StateLayout {
    pub layout: Arc<Layout>,
    pub layers: Vec<LayerClasses>,
    pub slack: usize,
}

impl Dsv4StateLayout {
    /// Whether `other` is this layout with (possibly) more ring slack: the
    /// same classes in the same order, rings at least as long.
    pub fn accepts(&self, other: &kvstate::Layout) -> bool {
        self.layout.classes.len() == other.classes.len()
            && self.layout.classes.iter().zip(&other.classes).all(|(a, b)| {
                a.name == b.name
                    && a.row_width == b.row_width
                    && a.elem == b.elem
                    && match (a.rule, b.rule) {
                        (CapacityRule::Ring { rows: x }, CapacityRule::Ring { rows: y }) => y >= x,
                        (x, y) => x == y,
                    }
            })
    }

    /// Rewind a state to `positions` consumed positions (speculative
    /// rollback): every class's counter to what `positions` tokens leave.
    /// Sound while the rewind is at most `slack` positions.
    pub fn rewind(
        &self,
        cfg: &Dsv4Config,
        state: &mut dyn kvstate::StateStore,
        positions: usize,
    ) -> Result<(), kvstate::StateError> {
        let now = state.positions();
        if positions > now || now - positions > self.slack {
            return Err(kvstate::StateError::Format(format!(
                "cannot rewind from {now} to {positions} positions with a ring slack of {}",
                self.slack
            )));
        }
        for (l, lc) in self.layers.iter().enumerate() {
            state.truncate(lc.kv, positions as u64)?;
            for c in [lc.comp_pending, lc.idx_pending].into_iter().flatten() {
                state.truncate(c, positions as u64)?;
            }
            let ratio = cfg.compress_ratio(l);
            for c in [lc.comp_entries, lc.idx_entries].into_iter().flatten() {
                state.truncate(c, (positions / ratio) as u64)?;
            }
        }
        state.set_positions(positions);
        Ok(())
    }

    pub fn new(cfg: &Dsv4Config, slack: usize) -> Self {
        let mut classes = Vec::new();
        let mut layers = Vec::new();
        let (hd, di) = (cfg.head_dim, cfg.index_head_dim);
        for l in 0..cfg.num_hidden_layers {
            let mut push = |name: String, width: usize, rule: CapacityRule| {
                classes.push(ClassSpec::new(name, width, ElemType::F32, rule));
                classes.len() - 1
            };
            let kv = push(format!("layer{l:02}.kv"), hd, CapacityRule::Ring { rows: cfg.sliding_window + slack });
            let mut lc =
                LayerClasses { kv, comp_pending: None, comp_entries: None, idx_pending: None, idx_entries: None };
            match cfg.layer_types[l] {
                AttnKind::Window => {}
                AttnKind::Csa => {
                    let r = cfg.csa_ratio;
                    lc.comp_pending = Some(push(
                        format!("layer{l:02}.comp.pending"),
                        4 * hd,
                        CapacityRule::Ring { rows: 2 * r + slack },
                    ));
                    lc.comp_entries = Some(push(
                        format!("layer{l:02}.comp.entries"),
                        hd,
                        CapacityRule::Grows { positions_per_row: r },
                    ));
                    lc.idx_pending = Some(push(
                        format!("layer{l:02}.idx.pending"),
                        4 * di,
                        CapacityRule::Ring { rows: 2 * r + slack },
                    ));
                    lc.idx_entries = Some(push(
                        format!("layer{l:02}.idx.entries"),
                        di,
                        CapacityRule::Grows { positions_per_row: r },
                    ));
                }
                AttnKind::Hca => {
                    let r = cfg.hca_ratio;
                    lc.comp_pending =
                        Some(push(format!("layer{l:02}.comp.pending"), 2 * hd, CapacityRule::Ring { rows: r + slack }));
                    lc.comp_entries = Some(push(
                        format!("layer{l:02}.comp.entries"),
                        hd,
                        CapacityRule::Grows { positions_per_row: r },
                    ));
                }
            }
            layers.push(lc);
        }
        let layout = Arc::new(Layout::new(classes).expect("DSV4 class names are unique"));
        Dsv4StateLayout { layout, layers, slack }
    }
}
