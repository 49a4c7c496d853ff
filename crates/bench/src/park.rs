//! Park/restore throughput: a decode state filled to capacity is copied to
//! page-locked host memory and back, against a plain pinned copy of the same
//! size measured in the same run (the link's ceiling).

use std::time::Instant;

use anyhow::{anyhow, Result};
use cudarc::driver::result;
use kvstate::{CapacityRule, ClassSnapshot, Snapshot, StateStore};
use serde::Serialize;

use trunk::gpu::Dsv4Gpu;

#[derive(Clone, Debug, Serialize)]
pub struct ParkReport {
    pub capacity: usize,
    pub classes: usize,
    pub bytes: usize,
    pub snapshot_gbps: f64,
    pub restore_gbps: f64,
    pub link_d2h_gbps: f64,
    pub link_h2d_gbps: f64,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Fill a state of `capacity` positions completely (synthetic rows), then
/// time `reps` snapshots and restores.
pub fn measure(gpu: &Dsv4Gpu, capacity: usize, reps: usize) -> Result<ParkReport> {
    let mut st = gpu.alloc_decode_state_for_transient(capacity, 1)?;
    let layout = st.layout().clone();
    // a full state: every class at its capacity
    let mut classes = Vec::new();
    for (i, spec) in layout.classes.iter().enumerate() {
        let rows = st.rows(i);
        let written = match spec.rule {
            CapacityRule::Ring { .. } => capacity.max(rows) as u64,
            _ => rows as u64,
        };
        let bytes: Vec<u8> = (0..rows * spec.row_bytes()).map(|k| (k * 31 + i * 7) as u8).collect();
        classes.push(ClassSnapshot { written, live_rows: rows, bytes });
    }
    let full = Snapshot { layout: layout.clone(), positions: capacity, classes };
    st.kv.restore_bulk(&full).map_err(|e| anyhow!("{e}"))?;
    let ctx = gpu.context().clone();
    let mut snap = st.kv.pinned_snapshot_buffers(&ctx).map_err(|e| anyhow!("{e}"))?;
    let bytes = snap.bytes();
    let (mut d2h, mut h2d) = (Vec::new(), Vec::new());
    for _ in 0..reps {
        let t = Instant::now();
        st.kv.read_into(&mut snap).map_err(|e| anyhow!("{e}"))?;
        d2h.push(t.elapsed().as_secs_f64());
        let t = Instant::now();
        st.kv.restore_bulk(&snap).map_err(|e| anyhow!("{e}"))?;
        h2d.push(t.elapsed().as_secs_f64());
    }
    for (a, b) in snap.classes.iter().zip(&full.classes) {
        if a.bytes.as_ref() != b.bytes.as_slice() {
            return Err(anyhow!("snapshot bytes differ from what was restored"));
        }
    }
    // the link: one contiguous pinned copy of the same size each way
    let stream = ctx.new_stream().map_err(|e| anyhow!("{e}"))?;
    let dev = stream.alloc_zeros::<u8>(bytes).map_err(|e| anyhow!("{e}"))?;
    let mut host = kvstate::PinnedBytes::new(&ctx, bytes).map_err(|e| anyhow!("{e}"))?;
    let dptr = {
        use cudarc::driver::DevicePtr;
        let (p, _s) = dev.device_ptr(&stream);
        p
    };
    let (mut ld, mut lh) = (Vec::new(), Vec::new());
    for _ in 0..reps {
        let t = Instant::now();
        // SAFETY: both buffers hold `bytes`; synchronized before reuse.
        unsafe { result::memcpy_dtoh_async(host.as_mut(), dptr, stream.cu_stream()) }.map_err(|e| anyhow!("{e}"))?;
        stream.synchronize().map_err(|e| anyhow!("{e}"))?;
        ld.push(t.elapsed().as_secs_f64());
        let t = Instant::now();
        // SAFETY: as above.
        unsafe { result::memcpy_htod_async(dptr, host.as_ref(), stream.cu_stream()) }.map_err(|e| anyhow!("{e}"))?;
        stream.synchronize().map_err(|e| anyhow!("{e}"))?;
        lh.push(t.elapsed().as_secs_f64());
    }
    let gbps = |s: f64| bytes as f64 / s / 1e9;
    Ok(ParkReport {
        capacity,
        classes: layout.classes.len(),
        bytes,
        snapshot_gbps: gbps(median(d2h)),
        restore_gbps: gbps(median(h2d)),
        link_d2h_gbps: gbps(median(ld)),
        link_h2d_gbps: gbps(median(lh)),
    })
}
