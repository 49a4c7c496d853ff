//! Device storage (cudarc, dynamically loaded): each class in one device
//! buffer on the stream of the device that owns it, behind `StateStore`;
//! and page-locked host buffers for snapshots.
//!
//! Copies move live rows only: a growing class is one contiguous range, a
//! ring at most two. Each copy runs with its class's own context current
//! (classes may live on several devices). Host buffers are allocated
//! page-locked and portable (pinned for every context, so copies to and
//! from any device run at link speed) without the write-combined flag, so
//! the CPU reads them at full speed after a snapshot.

use std::sync::Arc;

use cudarc::driver::{result, CudaContext, CudaSlice, CudaStream, DevicePtr};

use crate::layout::{CapacityRule, Layout};
use crate::snapshot::{ClassSnapshot, HostBytes, Snapshot};
use crate::state::{live_rows, StateStore};
use crate::StateError;

fn dev_err(what: &str, e: impl std::fmt::Display) -> StateError {
    StateError::Format(format!("{what}: {e}"))
}

/// Page-locked host memory (not write-combined).
pub struct PinnedBytes {
    ptr: *mut u8,
    len: usize,
    _ctx: Arc<CudaContext>,
}

// SAFETY: the allocation is owned uniquely and freed once, on drop.
unsafe impl Send for PinnedBytes {}
unsafe impl Sync for PinnedBytes {}

impl PinnedBytes {
    pub fn new(ctx: &Arc<CudaContext>, len: usize) -> Result<Self, StateError> {
        ctx.bind_to_thread().map_err(|e| dev_err("binding the CUDA context", e))?;
        // SAFETY: plain page-locked allocation (cached, not write-combined;
        // portable: pinned for every context of the process).
        let ptr = unsafe { result::malloc_host(len.max(1), cudarc::driver::sys::CU_MEMHOSTALLOC_PORTABLE) }
            .map_err(|e| dev_err("cuMemHostAlloc", e))? as *mut u8;
        Ok(PinnedBytes { ptr, len, _ctx: ctx.clone() })
    }
}

impl Drop for PinnedBytes {
    fn drop(&mut self) {
        // SAFETY: allocated by cuMemHostAlloc in `new`, freed once.
        let _ = unsafe { result::free_host(self.ptr as *mut std::ffi::c_void) };
    }
}

impl AsRef<[u8]> for PinnedBytes {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: `len` bytes allocated in `new`.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl AsMut<[u8]> for PinnedBytes {
    fn as_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above, unique borrow.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl HostBytes for PinnedBytes {}

/// One class on a device.
pub struct DeviceClass {
    pub stream: Arc<CudaStream>,
    pub buf: CudaSlice<u8>,
    /// Raw device address of row 0.
    pub ptr: u64,
    pub rows: usize,
    pub written: u64,
}

impl DeviceClass {
    /// Make this class's context current on the calling thread: raw copies
    /// on its stream need it (another device's context may be current).
    fn bind(&self, name: &str) -> Result<(), StateError> {
        self.stream
            .context()
            .bind_to_thread()
            .map_err(|e| dev_err(&format!("binding the context of class `{name}`"), e))
    }
}

/// A state whose classes live on devices.
pub struct DeviceState {
    layout: Arc<Layout>,
    capacity: usize,
    positions: usize,
    pub classes: Vec<DeviceClass>,
}

impl DeviceState {
    /// Allocate (zeroed) for `capacity` positions; `stream_of(i)` places class `i`.
    pub fn new(
        layout: Arc<Layout>,
        capacity: usize,
        stream_of: impl Fn(usize) -> Arc<CudaStream>,
    ) -> Result<Self, StateError> {
        let mut classes = Vec::with_capacity(layout.classes.len());
        for (i, spec) in layout.classes.iter().enumerate() {
            let stream = stream_of(i);
            let rows = spec.rule.rows_for(capacity);
            let bytes = (rows * spec.row_bytes()).max(1);
            let buf = stream
                .alloc_zeros::<u8>(bytes)
                .map_err(|e| dev_err(&format!("allocating {bytes} bytes for class `{}`", spec.name), e))?;
            let ptr = {
                let (p, _sync) = buf.device_ptr(&stream);
                p
            };
            classes.push(DeviceClass { stream, buf, ptr, rows, written: 0 });
        }
        Ok(DeviceState { layout, capacity, positions: 0, classes })
    }

    /// Record `rows` more rows appended to class `i` (the caller's kernels wrote them).
    pub fn advance(&mut self, class: usize, rows: u64) {
        self.classes[class].written += rows;
    }

    /// Bytes allocated on the devices.
    pub fn allocated_bytes(&self) -> usize {
        self.layout.classes.iter().zip(&self.classes).map(|(s, c)| c.rows * s.row_bytes()).sum()
    }

    /// (first slot, rows) runs of the live rows of class `i`, oldest first.
    fn live_runs(&self, class: usize, written: u64) -> Vec<(usize, usize)> {
        let spec = &self.layout.classes[class];
        let c = &self.classes[class];
        let live = live_rows(spec, c.rows, written);
        if live == 0 {
            return vec![];
        }
        match spec.rule {
            CapacityRule::Ring { .. } => {
                let first = ((written - live as u64) % c.rows as u64) as usize;
                let a = live.min(c.rows - first);
                if a == live {
                    vec![(first, live)]
                } else {
                    vec![(first, a), (0, live - a)]
                }
            }
            _ => vec![(0, live)],
        }
    }
}

impl DeviceState {
    /// Page-locked snapshot buffers sized for the current live rows, with the
    /// counters filled in (the bytes by `read_into`).
    pub fn pinned_snapshot_buffers(&self, ctx: &Arc<CudaContext>) -> Result<Snapshot<PinnedBytes>, StateError> {
        let mut classes = Vec::with_capacity(self.classes.len());
        for (i, spec) in self.layout.classes.iter().enumerate() {
            let live = self.live_rows(i);
            classes.push(ClassSnapshot {
                written: self.classes[i].written,
                live_rows: live,
                bytes: PinnedBytes::new(ctx, live * spec.row_bytes())?,
            });
        }
        Ok(Snapshot { layout: self.layout.clone(), positions: self.positions, classes })
    }

    /// Copy every class's live rows into `snap` (sized by
    /// `pinned_snapshot_buffers` for this state's current contents): all
    /// copies are queued, then each stream is synchronized once.
    pub fn read_into<B: HostBytes>(&self, snap: &mut Snapshot<B>) -> Result<(), StateError> {
        for (i, spec) in self.layout.classes.iter().enumerate() {
            let c = &self.classes[i];
            let rb = spec.row_bytes();
            let same_counter = snap.classes[i].written == c.written;
            let out = snap.classes[i].bytes.as_mut();
            if out.len() != self.live_rows(i) * rb || !same_counter {
                return Err(StateError::Size {
                    class: spec.name.clone(),
                    expected: self.live_rows(i) * rb,
                    got: out.len(),
                });
            }
            // SAFETY: `out` (in `snap`) outlives the synchronization below.
            unsafe { self.queue_to_host(i, c.written, out)? };
        }
        snap.positions = self.positions;
        self.sync_streams()
    }

    /// Restore a snapshot with all copies queued before one synchronization
    /// per stream. Checked first: on error nothing is written.
    pub fn restore_bulk<B: HostBytes>(&mut self, snap: &Snapshot<B>) -> Result<(), StateError> {
        crate::snapshot::check_restorable(snap, self)?;
        for i in 0..self.classes.len() {
            // SAFETY: `snap` outlives the synchronization below.
            unsafe { self.queue_from_host(i, snap.classes[i].written, snap.classes[i].bytes.as_ref())? };
        }
        self.sync_streams()?;
        for (i, c) in snap.classes.iter().enumerate() {
            self.classes[i].written = c.written;
        }
        self.positions = snap.positions;
        Ok(())
    }

    /// Queue, on class `class`'s stream with its context current, the
    /// copies of its live rows as of `written` into `out` (oldest first).
    ///
    /// # Safety
    /// `out` must hold exactly those rows and stay alive, untouched, until
    /// the stream is synchronized.
    unsafe fn queue_to_host(&self, class: usize, written: u64, out: &mut [u8]) -> Result<(), StateError> {
        let (spec, c) = (&self.layout.classes[class], &self.classes[class]);
        let rb = spec.row_bytes();
        c.bind(&spec.name)?;
        let mut o = 0;
        for (slot, rows) in self.live_runs(class, written) {
            let n = rows * rb;
            // SAFETY: the device range lies inside the class buffer; the caller keeps `out` alive.
            unsafe { result::memcpy_dtoh_async(&mut out[o..o + n], c.ptr + (slot * rb) as u64, c.stream.cu_stream()) }
                .map_err(|e| dev_err(&format!("copying class `{}` to the host", spec.name), e))?;
            o += n;
        }
        Ok(())
    }

    /// Queue the copies of `src` (the live rows as of `written`, oldest
    /// first) into class `class`'s slots, as `queue_to_host` in reverse.
    ///
    /// # Safety
    /// `src` must stay alive, unchanged, until the stream is synchronized.
    unsafe fn queue_from_host(&self, class: usize, written: u64, src: &[u8]) -> Result<(), StateError> {
        let (spec, c) = (&self.layout.classes[class], &self.classes[class]);
        let rb = spec.row_bytes();
        c.bind(&spec.name)?;
        let mut o = 0;
        for (slot, rows) in self.live_runs(class, written) {
            let n = rows * rb;
            // SAFETY: the device range lies inside the class buffer; the caller keeps `src` alive.
            unsafe { result::memcpy_htod_async(c.ptr + (slot * rb) as u64, &src[o..o + n], c.stream.cu_stream()) }
                .map_err(|e| dev_err(&format!("copying class `{}` to the device", spec.name), e))?;
            o += n;
        }
        Ok(())
    }

    fn sync_streams(&self) -> Result<(), StateError> {
        let mut done: Vec<*mut std::ffi::c_void> = Vec::new();
        for c in &self.classes {
            let s = c.stream.cu_stream() as *mut std::ffi::c_void;
            if !done.contains(&s) {
                c.stream.synchronize().map_err(|e| dev_err("synchronizing", e))?;
                done.push(s);
            }
        }
        Ok(())
    }
}

impl StateStore for DeviceState {
    fn layout(&self) -> &Arc<Layout> {
        &self.layout
    }
    fn capacity(&self) -> usize {
        self.capacity
    }
    fn positions(&self) -> usize {
        self.positions
    }
    fn set_positions(&mut self, positions: usize) {
        self.positions = positions;
    }
    fn written(&self, class: usize) -> u64 {
        self.classes[class].written
    }

    fn truncate(&mut self, class: usize, written: u64) -> Result<(), StateError> {
        crate::state::rewind_counter(&self.layout.classes[class].name, &mut self.classes[class].written, written)
    }

    fn read_live(&self, class: usize, out: &mut [u8]) -> Result<(), StateError> {
        let spec = &self.layout.classes[class];
        let c = &self.classes[class];
        let rb = spec.row_bytes();
        let live = live_rows(spec, c.rows, c.written);
        if out.len() != live * rb {
            return Err(StateError::Size { class: spec.name.clone(), expected: live * rb, got: out.len() });
        }
        // SAFETY: `out` outlives the synchronization below.
        unsafe { self.queue_to_host(class, c.written, out)? };
        c.stream.synchronize().map_err(|e| dev_err("synchronizing", e))
    }

    fn write_live(&mut self, class: usize, written: u64, rows: &[u8]) -> Result<(), StateError> {
        let spec = self.layout.classes[class].clone();
        let nrows = self.classes[class].rows;
        if !matches!(spec.rule, CapacityRule::Ring { .. }) && written as usize > nrows {
            return Err(StateError::Full { class: spec.name.clone(), rows: nrows });
        }
        let rb = spec.row_bytes();
        let live = live_rows(&spec, nrows, written);
        if rows.len() != live * rb {
            return Err(StateError::Size { class: spec.name.clone(), expected: live * rb, got: rows.len() });
        }
        // SAFETY: `rows` outlives the synchronization below.
        unsafe { self.queue_from_host(class, written, rows)? };
        let c = &mut self.classes[class];
        c.stream.synchronize().map_err(|e| dev_err("synchronizing", e))?;
        c.written = written;
        Ok(())
    }
}
