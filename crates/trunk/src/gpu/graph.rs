//! Decode steps replayed from CUDA graphs. A greedy decode step is captured
//! from the same launches the stream path makes (the same kernels and
//! arguments, so the same bits) while the step before it runs on the
//! device, and then launched as one graph: the device no longer waits on
//! the host between the step's ~135 kernels. The step's token and its
//! greedy result pass through two words of pinned host memory that the
//! kernels read and write directly, and its head row (0) is a device word
//! of its own, so a captured step depends on nothing the host writes to
//! the state's buffers.
//!
//! A capture holds the arguments of one position: the host records the
//! next position's step after launching the current one (`record`), keyed
//! by everything the arguments depend on ([`StepKey`]); a later step finds
//! it with `take`. Executable graphs are kept by node count (steps that
//! close compression windows launch more kernels), two of each so that the
//! one launched last is never touched, and updated in place from each new
//! capture where the driver allows it.

use std::sync::Arc;

use anyhow::{anyhow, bail, Context, Result};
use cudarc::driver::sys;
use cudarc::driver::{CudaContext, CudaStream};

use super::device::{Buf, Gpu};

/// Executable graphs kept at once: two for each step shape (no window
/// closing, the short compression windows closing, the long ones too), so
/// that a new capture never updates the graph of the step still running.
const KEPT: usize = 6;

/// What a captured step's arguments depend on besides the state's own
/// buffers (a state keeps its buffers for life): the model realization,
/// its options, and the state's positions and written rows per class.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct StepKey {
    pub model: u64,
    pub options: super::options::GpuOptions,
    pub positions: usize,
    pub written: Vec<u64>,
}

/// Words of the pinned host block.
const TOKEN_IN: usize = 0;
const TOKEN_OUT: usize = 1;
const WORDS: usize = 2;

/// A state's decode-step graphs and their pinned input/output words.
pub struct StepGraphs {
    ctx: Arc<CudaContext>,
    host: *mut i32,
    device: u64,
    /// The head row of a one-token step: 0.
    head_row: Buf<i32>,
    /// Executable graphs, most recently installed last.
    execs: Vec<Exec>,
    /// Executables made so far (their ids).
    made: u64,
    /// The step recorded last and the executable that holds it.
    ready: Option<(StepKey, u64)>,
    /// The executable launched last (perhaps still running).
    launched: Option<u64>,
}

struct Exec {
    id: u64,
    nodes: usize,
    exec: sys::CUgraphExec,
}

// SAFETY: the graphs and the pinned block are driver objects that any
// thread may use while calls on them are serialized; every call that uses
// them takes `&mut self` (or is reached through `&mut GpuState`).
unsafe impl Send for StepGraphs {}
unsafe impl Sync for StepGraphs {}

fn driver(what: &str) -> impl FnOnce(cudarc::driver::DriverError) -> anyhow::Error + '_ {
    move |e| anyhow!("CUDA graph: {what}: {e}")
}

impl StepGraphs {
    pub fn new(gpu: &Gpu) -> Result<StepGraphs> {
        let (ctx, head_row) = (&gpu.ctx, gpu.upload(&[0i32])?);
        ctx.bind_to_thread().map_err(driver("binding the context"))?;
        // SAFETY: a fresh pinned, device-mapped block of WORDS i32, zeroed
        // below before any use.
        let host = unsafe { cudarc::driver::result::malloc_host(WORDS * 4, sys::CU_MEMHOSTALLOC_DEVICEMAP) }
            .map_err(driver("allocating pinned host words"))? as *mut i32;
        let mut device = 0;
        // SAFETY: `host` is a live mapped allocation.
        let mapped = unsafe { sys::cuMemHostGetDevicePointer_v2(&mut device, host as *mut _, 0) }.result();
        let graphs = StepGraphs {
            ctx: ctx.clone(),
            host,
            device,
            head_row,
            execs: Vec::new(),
            made: 0,
            ready: None,
            launched: None,
        };
        mapped.map_err(driver("mapping pinned host words"))?;
        for i in 0..WORDS {
            // SAFETY: in bounds of the block; no kernel uses it yet.
            unsafe { graphs.host.add(i).write_volatile(0) };
        }
        Ok(graphs)
    }

    /// Device addresses of the token a step reads, the head row it takes
    /// (always 0: one token) and the greedy token it writes.
    pub fn token_in(&self) -> u64 {
        self.device + (TOKEN_IN * 4) as u64
    }
    pub fn head_row(&self) -> u64 {
        self.head_row.ptr
    }
    pub fn token_out(&self) -> u64 {
        self.device + (TOKEN_OUT * 4) as u64
    }

    /// Set the token the next launched step reads (no step may be running).
    pub fn set_token(&mut self, token: i32) {
        // SAFETY: in bounds; the caller has waited for every step that reads it.
        unsafe { self.host.add(TOKEN_IN).write_volatile(token) }
    }

    /// The greedy token the last step wrote (after the stream is synchronized).
    pub fn token(&self) -> i32 {
        // SAFETY: in bounds; the device's write completed before the sync.
        unsafe { self.host.add(TOKEN_OUT).read_volatile() }
    }

    /// Capture the launches `enqueue` makes on `stream` (and on streams
    /// forked from it) as the step for `key`, and make it ready to launch.
    /// Nothing runs on the device; the host state must not change.
    pub(super) fn record(
        &mut self,
        stream: &CudaStream,
        key: StepKey,
        enqueue: impl FnOnce() -> Result<()>,
    ) -> Result<()> {
        self.ready = None;
        stream
            .begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
            .map_err(driver("beginning a capture"))?;
        let enqueued = enqueue();
        // SAFETY: the stream is capturing (begun above); ending returns its graph.
        let graph = unsafe { cudarc::driver::result::stream::end_capture(stream.cu_stream()) };
        let graph = match graph {
            Ok(g) => g,
            Err(e) => {
                enqueued?;
                return Err(driver("capturing a decode step")(e));
            }
        };
        if let Err(e) = enqueued {
            if !graph.is_null() {
                // SAFETY: a graph this capture returned, used nowhere else.
                let _ = unsafe { cudarc::driver::result::graph::destroy(graph) };
            }
            return Err(e);
        }
        if graph.is_null() {
            bail!("CUDA graph: the capture of a decode step is empty");
        }
        let installed = self.install(graph, stream);
        // SAFETY: the executable graphs hold their own copies of the nodes.
        let destroyed = unsafe { cudarc::driver::result::graph::destroy(graph) };
        let id = installed?;
        destroyed.map_err(driver("releasing a captured step"))?;
        self.ready = Some((key, id));
        Ok(())
    }

    /// Make `graph` executable: update a kept graph of the same node count
    /// in place (never the one launched last), or instantiate it (dropping
    /// the oldest beyond [`KEPT`]). Returns its id.
    fn install(&mut self, graph: sys::CUgraph, stream: &CudaStream) -> Result<u64> {
        let mut nodes = 0usize;
        // SAFETY: counting the nodes of a live graph.
        unsafe { sys::cuGraphGetNodes(graph, std::ptr::null_mut(), &mut nodes) }
            .result()
            .map_err(driver("counting a step's nodes"))?;
        let launched = self.launched;
        if let Some(i) = self.execs.iter().position(|e| e.nodes == nodes && Some(e.id) != launched) {
            let e = self.execs.remove(i);
            // SAFETY: a zeroed result is a valid value of the C struct.
            let mut info: sys::CUgraphExecUpdateResultInfo = unsafe { std::mem::zeroed() };
            // SAFETY: `e.exec` and `graph` are live, and `e.exec` is not the
            // executable launched last, so no launch of it is still running.
            let updated = unsafe { sys::cuGraphExecUpdate_v2(e.exec, graph, &mut info) };
            if updated == sys::CUresult::CUDA_SUCCESS {
                let id = e.id;
                self.execs.push(e);
                return Ok(id);
            }
            // another shape with the same node count: replace it
            // SAFETY: ours and no longer listed.
            let _ = unsafe { cudarc::driver::result::graph::exec_destroy(e.exec) };
        }
        if self.execs.len() >= KEPT {
            let i = self.execs.iter().position(|e| Some(e.id) != launched).expect("KEPT > 1");
            let old = self.execs.remove(i);
            // SAFETY: ours and no longer listed; a launch of it already
            // enqueued keeps its resources until it completes.
            unsafe { cudarc::driver::result::graph::exec_destroy(old.exec) }
                .map_err(driver("dropping a step graph"))?;
        }
        // SAFETY: `graph` is a live, complete capture.
        let exec = unsafe { cudarc::driver::result::graph::instantiate(graph, sys::CUgraphInstantiate_flags(0)) }
            .map_err(driver("instantiating a decode step"))?;
        self.made += 1;
        let id = self.made;
        self.execs.push(Exec { id, nodes, exec });
        // SAFETY: `exec` is live; uploading is ordered on the stream.
        unsafe { cudarc::driver::result::graph::upload(exec, stream.cu_stream()) }
            .map_err(driver("uploading a decode step"))?;
        Ok(id)
    }

    /// The executable holding the step recorded for `key`, if the last
    /// recording was for it; the recording is used up either way.
    pub(super) fn take(&mut self, key: &StepKey) -> Option<u64> {
        self.ready.take().filter(|(k, _)| k == key).map(|(_, id)| id)
    }

    /// Launch the step graph `id` (from `take`) on `stream`.
    pub(super) fn launch(&mut self, id: u64, stream: &CudaStream) -> Result<()> {
        let e = self.execs.iter().find(|e| e.id == id).context("CUDA graph: a recorded step is gone")?;
        self.ctx.bind_to_thread().map_err(driver("binding the context"))?;
        // SAFETY: the graph is live; its kernels address the state's
        // buffers and this block, all alive while the state is.
        unsafe { cudarc::driver::result::graph::launch(e.exec, stream.cu_stream()) }
            .map_err(driver("launching a decode step"))?;
        self.launched = Some(id);
        Ok(())
    }
}

impl Drop for StepGraphs {
    fn drop(&mut self) {
        let _ = self.ctx.bind_to_thread();
        // a step still running writes the pinned words: let it finish
        let _ = self.ctx.synchronize();
        for e in self.execs.drain(..) {
            // SAFETY: ours; a launch still running is freed when it completes.
            let _ = unsafe { cudarc::driver::result::graph::exec_destroy(e.exec) };
        }
        // SAFETY: allocated by `malloc_host` in `new`, freed once.
        let _ = unsafe { cudarc::driver::result::free_host(self.host as *mut _) };
    }
}
