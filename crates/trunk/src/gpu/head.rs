//! The head of `Dsv4Gpu` as kernel launches: the streams collapsed
//! (`hc_head`), the final norm, the vocabulary's product and, for greedy
//! steps, each row's argmax.

use anyhow::Result;

use super::device::Gpu;
use super::forward::Dsv4Gpu;
use super::state::{GpuState, Scratch, ARGMAX_SLICES, LOGIT_ROWS};
use crate::cpu::Logits;
use crate::launch;

impl Dsv4Gpu {
    /// Logits (or their argmax) of the rows `which` selects.
    pub(super) fn head(
        &self,
        st: &mut GpuState,
        n: usize,
        which: Logits,
        greedy: bool,
    ) -> Result<(Vec<f32>, Vec<i32>)> {
        let c = &self.config;
        let si = st.scratch.len() - 1;
        let stage = &self.stages[si];
        let g = &stage.gpu;
        let rows: Vec<i32> = match which {
            Logits::All => (0..n as i32).collect(),
            Logits::Last => vec![n as i32 - 1],
            Logits::None => vec![],
        };
        let v = c.vocab_size;
        self.mark(si, "head")?;
        let mut logits = Vec::new();
        let mut arg = Vec::new();
        for chunk in rows.chunks(LOGIT_ROWS) {
            let cnt = chunk.len();
            g.write(&mut st.scratch[si].head_rows, chunk)?;
            let sc = &st.scratch[si];
            let argmax = greedy.then_some(sc.argmax.ptr);
            self.head_rows(sc, sc.head_rows.ptr, cnt, argmax)?;
            if greedy {
                arg.extend(g.download(&sc.argmax, cnt)?);
            } else {
                logits.extend(g.download(&sc.logits, cnt * v)?);
            }
        }
        for s in &self.stages {
            s.gpu.sync()?;
        }
        Ok((logits, arg))
    }

    /// Enqueue the logits of `cnt` head rows (their indices at `rows`, a
    /// device address) on the last stage: the streams collapsed, the final
    /// norm, the head; with `argmax` (a device address), each row's
    /// greedy token written there too.
    pub(super) fn head_rows(&self, sc: &Scratch, rows: u64, cnt: usize, argmax: Option<u64>) -> Result<()> {
        let stage = self.stages.last().expect("a model has a stage");
        let g = &stage.gpu;
        let head = stage.head.as_ref().expect("the last stage holds the head");
        let norm = stage.norm.as_ref().expect("the last stage holds the final norm").ptr;
        let hcw = stage.hc_head.as_ref().expect("the last stage holds hc_head");
        self.hc_head(g, sc, hcw, rows, cnt, Some(norm))?;
        self.lin(g, head, sc.hy.ptr, sc.logits.ptr, cnt)?;
        if let Some(out) = argmax {
            launch!(g, "argmax_slices", Gpu::cfg((cnt as u32, ARGMAX_SLICES as u32, 1), 256, 0);
                sc.logits.ptr, self.config.vocab_size as i32, sc.argmax_v.ptr, sc.argmax_i.ptr);
            launch!(g, "argmax_rows", Gpu::cfg((cnt as u32, 1, 1), ARGMAX_SLICES as u32, 0);
                sc.argmax_v.ptr, sc.argmax_i.ptr, out);
        }
        Ok(())
    }
}
