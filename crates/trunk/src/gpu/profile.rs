//! Per-op timing of the GPU forward with device events: when enabled, the
//! forward records an event at every op boundary (`mark`); `take` turns the
//! events into (op, milliseconds) totals.

use std::collections::BTreeMap;
use std::sync::Mutex;

use anyhow::{anyhow, Result};
use cudarc::driver::CudaEvent;

use super::device::Gpu;

#[derive(Default)]
pub struct Profiler {
    enabled: bool,
    marks: Vec<(usize, &'static str, CudaEvent)>,
}

/// Shared, switchable profiler.
#[derive(Default)]
pub struct ProfileCell(Mutex<Profiler>);

impl ProfileCell {
    pub fn set(&self, on: bool) {
        let mut p = self.0.lock().unwrap();
        p.enabled = on;
        p.marks.clear();
    }

    pub fn enabled(&self) -> bool {
        self.0.lock().unwrap().enabled
    }

    /// Record the start of op `label` on stage `stage`.
    pub fn mark(&self, stage: usize, gpu: &Gpu, label: &'static str) -> Result<()> {
        let mut p = self.0.lock().unwrap();
        if !p.enabled {
            return Ok(());
        }
        let ev = gpu
            .ctx
            .new_event(Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT))
            .map_err(|e| anyhow!("{e}"))?;
        ev.record(&gpu.stream).map_err(|e| anyhow!("{e}"))?;
        p.marks.push((stage, label, ev));
        Ok(())
    }

    /// Milliseconds per label (the span from a mark to the next mark of the
    /// same stage), summed over everything recorded since `set(true)`.
    pub fn take(&self) -> Result<Vec<(String, f64)>> {
        let mut p = self.0.lock().unwrap();
        let marks = std::mem::take(&mut p.marks);
        let mut out: BTreeMap<String, f64> = BTreeMap::new();
        for (i, (stage, label, ev)) in marks.iter().enumerate() {
            if let Some((_, _, next)) = marks[i + 1..].iter().find(|(s, _, _)| s == stage) {
                next.synchronize().map_err(|e| anyhow!("{e}"))?;
                let ms = ev.elapsed_ms(next).map_err(|e| anyhow!("{e}"))? as f64;
                *out.entry((*label).to_string()).or_default() += ms;
            }
        }
        let mut v: Vec<(String, f64)> = out.into_iter().collect();
        v.sort_by(|a, b| b.1.total_cmp(&a.1));
        Ok(v)
    }
}
