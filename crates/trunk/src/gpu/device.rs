//! One CUDA device as the engine uses it: a context with event tracking off
//! (the engine orders its own work on one stream per stage, plus a side
//! stream joined to it by two events), the compiled kernels, and typed
//! buffers addressed by raw device pointers.

use std::collections::HashMap;
use std::sync::Arc;

use anyhow::{anyhow, bail, Context, Result};
use cudarc::driver::{
    CudaContext, CudaEvent, CudaFunction, CudaSlice, CudaStream, DevicePtr, DeviceRepr, LaunchConfig, ValidAsZeroBits,
};

use super::nvrtc;
use super::products::dynamic_smem_opt_in;

/// Why the GPU path cannot run here, if it cannot.
pub fn unavailable_reason() -> Option<String> {
    if !nvrtc::library_present("cuda") {
        return Some("no CUDA driver (libcuda.so) on this machine".into());
    }
    if !nvrtc::library_present("nvrtc") {
        return Some("no NVRTC library (libnvrtc.so) on this machine".into());
    }
    match CudaContext::device_count() {
        Ok(n) if n > 0 => None,
        Ok(_) => Some("the CUDA driver reports no devices".into()),
        Err(e) => Some(format!("CUDA driver error: {e}")),
    }
}

/// Fails, naming why, where the GPU path cannot run here: what a command
/// checks before it loads a model for the GPU, and what `Gpu::open` checks.
pub fn require_available() -> Result<()> {
    match unavailable_reason() {
        Some(why) => bail!("GPU backend unavailable: {why}"),
        None => Ok(()),
    }
}

/// A device buffer and its raw address.
pub struct Buf<T> {
    pub slice: CudaSlice<T>,
    pub ptr: u64,
    pub len: usize,
}

impl<T> Buf<T> {
    /// Address of element `i`.
    pub fn at(&self, i: usize) -> u64 {
        self.ptr + (i * std::mem::size_of::<T>()) as u64
    }
}

pub struct Gpu {
    pub ordinal: usize,
    /// Streaming multiprocessors, for sizing decode grids.
    pub sm_count: usize,
    pub ctx: Arc<CudaContext>,
    pub stream: Arc<CudaStream>,
    /// A second stream for work that only a later step needs (the hc
    /// Sinkhorn, beside the block): it starts after `side_start` is recorded
    /// on `stream`, which waits for `side_done` before using its results.
    pub side: Arc<CudaStream>,
    side_start: CudaEvent,
    side_done: CudaEvent,
    /// A third stream for launches that run beside the main stream's within
    /// a site (`branch`): while `on_branch` is set, launches meant for
    /// `stream` go here; `branch_join` orders the main stream after them.
    branch_stream: Arc<CudaStream>,
    branch_start: CudaEvent,
    branch_done: CudaEvent,
    on_branch: std::sync::atomic::AtomicBool,
    kernels: HashMap<&'static str, CudaFunction>,
    /// Blocks of (kernel, block size, dynamic shared bytes) an SM holds at once.
    resident: std::sync::Mutex<HashMap<(&'static str, u32, u32), u32>>,
}

impl Gpu {
    pub fn open(ordinal: usize) -> Result<Gpu> {
        require_available()?;
        let n = CudaContext::device_count().map_err(|e| anyhow!("{e}"))? as usize;
        if ordinal >= n {
            bail!("device {ordinal} does not exist (this machine has {n} CUDA device(s))");
        }
        let ctx = CudaContext::new(ordinal).map_err(|e| anyhow!("opening CUDA device {ordinal}: {e}"))?;
        // SAFETY: called before this process allocates through `ctx`; the
        // engine orders every use of a buffer on the stage's stream (and the
        // side stream's work between `side_fork` and `side_join`).
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx.new_stream().map_err(|e| anyhow!("creating a stream on device {ordinal}: {e}"))?;
        let side = ctx.new_stream().map_err(|e| anyhow!("creating a stream on device {ordinal}: {e}"))?;
        let event = || ctx.new_event(None).map_err(|e| anyhow!("creating an event on device {ordinal}: {e}"));
        let (side_start, side_done) = (event()?, event()?);
        let branch_stream = ctx.new_stream().map_err(|e| anyhow!("creating a stream on device {ordinal}: {e}"))?;
        let (branch_start, branch_done) = (event()?, event()?);
        let (major, minor) =
            ctx.compute_capability().map_err(|e| anyhow!("reading device {ordinal}'s compute capability: {e}"))?;
        let image = nvrtc::cubin(major, minor).map_err(|e| anyhow!("device {ordinal}: {e}"))?;
        let module = ctx
            .load_module(cudarc::nvrtc::Ptx::from_binary(image.to_vec()))
            .map_err(|e| anyhow!("loading kernels (sm_{major}{minor}) on device {ordinal}: {e}"))?;
        let mut kernels = HashMap::new();
        for &k in nvrtc::KERNELS {
            let f = module.load_function(k).map_err(|e| anyhow!("kernel `{k}`: {e}"))?;
            // one shared-memory carveout (the most) for every kernel, so that the SMs
            // never drain to repartition L1 between kernels of different needs
            f.set_attribute(
                cudarc::driver::sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT,
                100,
            )
            .map_err(|e| anyhow!("kernel `{k}`: setting its shared memory carveout: {e}"))?;
            let opt_in = dynamic_smem_opt_in(k);
            if let Some(bytes) = opt_in {
                f.set_attribute(
                    cudarc::driver::sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    bytes as i32,
                )
                .map_err(|e| anyhow!("kernel `{k}`: opting in to {bytes} bytes of shared memory: {e}"))?;
            }
            kernels.insert(k, f);
        }
        let sm_count = ctx
            .attribute(cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            .map_err(|e| anyhow!("querying device {ordinal}: {e}"))? as usize;
        let gpu = Gpu {
            ordinal,
            sm_count,
            ctx,
            stream,
            side,
            side_start,
            side_done,
            branch_stream,
            branch_start,
            branch_done,
            on_branch: Default::default(),
            kernels,
            resident: Default::default(),
        };
        // the FP4 experts' per-scale BF16 tables, once (kernels/moe_tensor.cu
        // `limb_tables_fill`): the `tensor` sums' expert kernels copy them
        crate::launch!(gpu, "limb_tables_fill", Gpu::cfg((1, 1, 1), 256, 0););
        gpu.sync()?;
        Ok(gpu)
    }

    /// Let this device's kernels and copies reach `peer`'s memory directly
    /// (over NVLink or PCIe, no host staging). Returns false where the two
    /// devices cannot reach each other; copies then go through the driver's
    /// staged path, which is correct but slower.
    pub fn enable_peer_access(&self, peer: &Gpu) -> Result<bool> {
        use cudarc::driver::sys;
        if peer.ordinal == self.ordinal {
            return Ok(true);
        }
        let mut can = 0i32;
        // SAFETY: plain driver queries and a context-scoped setting on live contexts.
        unsafe {
            sys::cuDeviceCanAccessPeer(&mut can, self.ctx.cu_device(), peer.ctx.cu_device())
                .result()
                .map_err(|e| anyhow!("cuDeviceCanAccessPeer({}, {}): {e}", self.ordinal, peer.ordinal))?;
            if can == 0 {
                return Ok(false);
            }
            self.ctx.bind_to_thread().map_err(|e| anyhow!("device {}: {e}", self.ordinal))?;
            match sys::cuCtxEnablePeerAccess(peer.ctx.cu_ctx(), 0) {
                sys::CUresult::CUDA_SUCCESS | sys::CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED => Ok(true),
                e => bail!("enabling peer access from device {} to {}: {e:?}", self.ordinal, peer.ordinal),
            }
        }
    }

    /// Make this device's context current on the calling thread (raw
    /// driver calls on its stream need it; cudarc's own calls bind it).
    pub fn bind(&self) -> Result<()> {
        self.ctx.bind_to_thread().map_err(|e| anyhow!("binding device {}: {e}", self.ordinal))
    }

    pub fn name(&self) -> String {
        self.ctx.name().unwrap_or_else(|_| "unknown".into())
    }

    /// (free, total) bytes.
    pub fn mem_info(&self) -> Result<(usize, usize)> {
        self.ctx.mem_get_info().map_err(|e| anyhow!("cuMemGetInfo on device {}: {e}", self.ordinal))
    }

    /// Where `need` bytes of `what` and `margin` more do not fit in this
    /// device's free memory, the line that says so; None where they fit.
    pub fn shortfall(&self, what: &str, need: usize, margin: usize) -> Result<Option<String>> {
        let gb = |b: usize| b as f64 / (1u64 << 30) as f64;
        let (free, total) = self.mem_info()?;
        Ok((need + margin > free).then(|| {
            format!(
                "device {}: {what} need {:.2} GiB, {:.2} GiB free of {:.2} GiB",
                self.ordinal,
                gb(need),
                gb(free),
                gb(total)
            )
        }))
    }

    pub fn alloc<T: DeviceRepr + ValidAsZeroBits>(&self, len: usize) -> Result<Buf<T>> {
        let slice = self.stream.alloc_zeros::<T>(len.max(1)).map_err(|e| {
            anyhow!("allocating {} bytes on device {}: {e}", len * std::mem::size_of::<T>(), self.ordinal)
        })?;
        let ptr = {
            let (p, _sync) = slice.device_ptr(&self.stream);
            p
        };
        Ok(Buf { slice, ptr, len })
    }

    pub fn upload<T: DeviceRepr + ValidAsZeroBits>(&self, host: &[T]) -> Result<Buf<T>> {
        let mut b = self.alloc::<T>(host.len())?;
        if !host.is_empty() {
            self.stream
                .memcpy_htod(host, &mut b.slice.slice_mut(..host.len()))
                .map_err(|e| anyhow!("copy to device {}: {e}", self.ordinal))?;
        }
        Ok(b)
    }

    /// Overwrite the first `host.len()` elements of `b`.
    pub fn write<T: DeviceRepr + ValidAsZeroBits>(&self, b: &mut Buf<T>, host: &[T]) -> Result<()> {
        if host.len() > b.len {
            bail!("write of {} elements into a buffer of {}", host.len(), b.len);
        }
        if !host.is_empty() {
            self.stream
                .memcpy_htod(host, &mut b.slice.slice_mut(..host.len()))
                .map_err(|e| anyhow!("copy to device {}: {e}", self.ordinal))?;
        }
        Ok(())
    }

    /// The first `n` elements of `b` (synchronizes the stream).
    pub fn download<T: DeviceRepr + ValidAsZeroBits + Default + Clone>(&self, b: &Buf<T>, n: usize) -> Result<Vec<T>> {
        let mut out = vec![T::default(); n];
        if n > 0 {
            self.stream
                .memcpy_dtoh(&b.slice.slice(..n), &mut out)
                .map_err(|e| anyhow!("copy from device {}: {e}", self.ordinal))?;
        }
        self.sync()?;
        Ok(out)
    }

    pub fn sync(&self) -> Result<()> {
        self.stream.synchronize().map_err(|e| anyhow!("device {}: {e}", self.ordinal))
    }

    /// RMS-normalize `rows` rows of `width` in place, times `w` (0: none).
    pub fn rms_norm(&self, x: u64, w: u64, rows: usize, width: usize, eps: f32) -> Result<()> {
        crate::launch!(self, "rms_norm_f32", Gpu::cfg((rows as u32, 1, 1), 256, 0); x, x, w, width as i32, eps);
        Ok(())
    }

    /// `dst = src` quantized to FP8 per 1x128 block and back (the `fp8`
    /// variant's activations); returns `dst`.
    pub fn act_fp8(&self, src: u64, dst: u64, rows: usize, width: usize) -> Result<u64> {
        self.bind()?;
        // SAFETY: the caller's buffers both hold rows*width f32.
        unsafe {
            cudarc::driver::result::memcpy_dtod_async(dst, src, rows * width * 4, self.route(&self.stream).cu_stream())
        }
        .map_err(|e| anyhow!("device {}: {e}", self.ordinal))?;
        crate::launch!(self, "act_fp8_rows", Gpu::cfg((rows as u32, width.div_ceil(128) as u32, 1), 128, 0); dst, width as i32);
        Ok(dst)
    }

    /// Let the side stream start: work launched on it from now on runs after
    /// everything launched on `stream` so far.
    pub fn side_fork(&self) -> Result<()> {
        self.side_start.record(&self.stream).map_err(|e| anyhow!("device {}: {e}", self.ordinal))?;
        self.side.wait(&self.side_start).map_err(|e| anyhow!("device {}: {e}", self.ordinal))
    }

    /// Work launched on `stream` from now on runs after everything launched
    /// on the side stream so far.
    pub fn side_join(&self) -> Result<()> {
        self.side_done.record(&self.side).map_err(|e| anyhow!("device {}: {e}", self.ordinal))?;
        self.stream.wait(&self.side_done).map_err(|e| anyhow!("device {}: {e}", self.ordinal))
    }

    /// Run `launch` with what it launches on `stream` going to a branch
    /// stream instead, after everything launched on `stream` so far;
    /// `branch_join` orders later work on `stream` after it.
    pub fn branch<R>(&self, launch: impl FnOnce() -> Result<R>) -> Result<R> {
        use std::sync::atomic::Ordering;
        self.branch_start.record(&self.stream).map_err(|e| anyhow!("device {}: {e}", self.ordinal))?;
        self.branch_stream.wait(&self.branch_start).map_err(|e| anyhow!("device {}: {e}", self.ordinal))?;
        self.on_branch.store(true, Ordering::Relaxed);
        let out = launch();
        self.on_branch.store(false, Ordering::Relaxed);
        out
    }

    /// Work launched on `stream` from now on runs after everything the
    /// last `branch` launched.
    pub fn branch_join(&self) -> Result<()> {
        self.branch_done.record(&self.branch_stream).map_err(|e| anyhow!("device {}: {e}", self.ordinal))?;
        self.stream.wait(&self.branch_done).map_err(|e| anyhow!("device {}: {e}", self.ordinal))
    }

    /// Where a launch meant for `stream` goes: the branch stream inside `branch`.
    fn route<'a>(&'a self, stream: &'a CudaStream) -> &'a CudaStream {
        if std::ptr::eq(stream, &*self.stream) && self.on_branch.load(std::sync::atomic::Ordering::Relaxed) {
            &self.branch_stream
        } else {
            stream
        }
    }

    /// Blocks of `kernel` (with `block` threads and `smem` dynamic shared
    /// bytes) one SM holds at once (0 where one does not fit), asked of the
    /// driver once per shape.
    pub(super) fn resident_blocks(&self, kernel: &'static str, block: u32, smem: u32) -> Result<usize> {
        let mut cache = self.resident.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(&n) = cache.get(&(kernel, block, smem)) {
            return Ok(n as usize);
        }
        let n = self
            .func(kernel)?
            .occupancy_max_active_blocks_per_multiprocessor(block, smem as usize, None)
            .map_err(|e| anyhow!("device {}: occupancy of `{kernel}`: {e}", self.ordinal))?;
        cache.insert((kernel, block, smem), n);
        Ok(n as usize)
    }

    /// Blocks for each of `shares` grid slices (tokens, groups) that the
    /// whole device holds at once (at least one): the grid of a kernel
    /// whose blocks loop over their work.
    pub fn resident_grid(&self, kernel: &'static str, block: u32, smem: u32, shares: usize) -> Result<usize> {
        Ok((self.resident_blocks(kernel, block, smem)?.max(1) * self.sm_count / shares).max(1))
    }

    pub fn func(&self, name: &str) -> Result<&CudaFunction> {
        self.kernels.get(name).with_context(|| format!("kernel `{name}` not loaded"))
    }

    /// Launch kernel `name` on `stream` (this device's `stream` or `side`;
    /// within `branch`, what is meant for `stream` goes to the branch
    /// stream). On the main and branch streams the launch allows
    /// programmatic dependent launch:
    /// the kernel's blocks may be scheduled while the kernel before it
    /// finishes, and wait in `await_inputs` (kernels/common.cuh, called by
    /// every kernel before it touches an earlier kernel's data) for it to
    /// complete. A launch's own latency and its blocks' start then overlap
    /// the previous kernel's tail instead of following it.
    ///
    /// # Safety
    /// `args` holds one pointer per kernel parameter, each to a live value
    /// of the parameter's type, and every address among those values points
    /// into a buffer of the size the kernel indexes.
    pub unsafe fn launch(
        &self,
        stream: &CudaStream,
        name: &str,
        cfg: LaunchConfig,
        args: &mut [*mut std::ffi::c_void],
    ) -> Result<()> {
        use cudarc::driver::sys;
        let f = self.func(name)?;
        let stream = self.route(stream);
        self.bind()?;
        // SAFETY: a zeroed attribute is a valid value of the C struct; its
        // id and value are set before use.
        let mut attr: sys::CUlaunchAttribute = unsafe { std::mem::zeroed() };
        attr.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
        attr.value.programmaticStreamSerializationAllowed = 1;
        let overlap = std::ptr::eq(stream, &*self.stream) || std::ptr::eq(stream, &*self.branch_stream);
        let config = sys::CUlaunchConfig {
            gridDimX: cfg.grid_dim.0,
            gridDimY: cfg.grid_dim.1,
            gridDimZ: cfg.grid_dim.2,
            blockDimX: cfg.block_dim.0,
            blockDimY: cfg.block_dim.1,
            blockDimZ: cfg.block_dim.2,
            sharedMemBytes: cfg.shared_mem_bytes,
            hStream: stream.cu_stream(),
            attrs: &mut attr,
            numAttrs: overlap as u32,
        };
        // SAFETY: `config` and `attr` outlive the call; the caller vouches
        // for `args`.
        unsafe { sys::cuLaunchKernelEx(&config, f.cu_function(), args.as_mut_ptr(), std::ptr::null_mut()) }
            .result()
            .map_err(|e| anyhow!("launching `{name}` on device {}: {e}", self.ordinal))
    }

    pub fn cfg(grid: (u32, u32, u32), block: u32, smem: u32) -> LaunchConfig {
        LaunchConfig { grid_dim: grid, block_dim: (block, 1, 1), shared_mem_bytes: smem }
    }
}

/// Launch `$name` on `$gpu` (on its stream, or `$gpu => side` on the side
/// stream) with a config and arguments (each a value that
/// implements `DeviceRepr`: raw addresses as u64, ints, floats, `MatArg`).
#[macro_export]
macro_rules! launch {
    ($gpu:expr, $name:expr, $cfg:expr; $($arg:expr),* $(,)?) => {
        $crate::launch!($gpu => stream, $name, $cfg; $($arg),*)
    };
    ($gpu:expr => $stream:ident, $name:expr, $cfg:expr; $($arg:expr),* $(,)?) => {{
        let gpu: &$crate::gpu::device::Gpu = &$gpu;
        let stream: &cudarc::driver::CudaStream = &gpu.$stream;
        let (name, cfg): (&str, cudarc::driver::LaunchConfig) = ($name, $cfg);
        let mut args: Vec<*mut std::ffi::c_void> = Vec::new();
        // each value lives (shadowed, not dropped) until the launch below
        $( let a = $arg; args.push($crate::gpu::device::kernel_arg(&a)); )*
        // SAFETY: argument types and counts follow the kernel signatures in
        // kernels/*.cu; every address points into a live buffer of the size
        // the kernel indexes; `args` points at values alive until the call returns.
        unsafe { gpu.launch(stream, name, cfg, &mut args) }?;
    }};
}

/// The address of one kernel argument, as `cuLaunchKernelEx` takes it.
pub fn kernel_arg<T: DeviceRepr>(a: &T) -> *mut std::ffi::c_void {
    a as *const T as *mut std::ffi::c_void
}
