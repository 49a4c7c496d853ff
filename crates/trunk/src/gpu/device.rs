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

/// Values per 16-byte weight chunk of a `Mat` format (kernels/common.cuh `Fmt`).
fn chunk_values(fmt: i32) -> usize {
    match fmt {
        1 => 8,  // BF16
        2 => 16, // FP8
        3 => 32, // FP4
        _ => 4,  // F32
    }
}

/// The most dynamic shared memory a whole-row decode kernel opts in to:
/// two blocks still fit on an H100/H200 SM (228 KiB).
pub const ROW_SMEM_MAX: usize = 112 << 10;

/// The kernels whose dynamic shared memory may pass the default 48 KiB:
/// those that stage a whole activation row (kernels/common.cuh
/// `staged_row_dots`) and the prefill tiles (kernels/linear.cu
/// `linear_tile_pairs`); they opt in to [`ROW_SMEM_MAX`].
const WHOLE_ROW_KERNELS: [&str; 4] = ["expert_gate_up", "expert_down", "linear_f32", "linear_grouped"];

/// The one-token product kernels (kernels/linear.cu `LINEAR_T1`): for each
/// rows a warp ([`rows_per_warp`]), one per weight format (the index:
/// `Mat.fmt`, F32, BF16, FP8, FP4). Each stages a whole activation row,
/// like [`WHOLE_ROW_KERNELS`].
pub const LINEAR_T1_KERNELS: [(usize, [&str; 4]); 3] = [
    (1, ["linear_t1_r1_f32", "linear_t1_r1_bf16", "linear_t1_r1_fp8", "linear_t1_r1_fp4"]),
    (2, ["linear_t1_r2_f32", "linear_t1_r2_bf16", "linear_t1_r2_fp8", "linear_t1_r2_fp4"]),
    (4, ["linear_t1_r4_f32", "linear_t1_r4_bf16", "linear_t1_r4_fp8", "linear_t1_r4_fp4"]),
];

/// Tokens (or pairs of one expert) the prefill's group kernels stage whole
/// at once (kernels/common.cuh `GROUP_TOKENS`; kernels/linear.cu
/// `linear_groups`, kernels/moe.cu `expert_gate_up_groups`,
/// `expert_down_groups`), the weight rows a warp takes at once
/// (kernels/common.cuh `GROUP_ROWS`), their block (8 warps) and the most
/// shared memory they opt in to: the group's staged rows, one block an SM.
pub const GROUP_TOKENS: usize = 4;
const GROUP_ROWS: usize = 4;
pub const GROUP_BLOCK: u32 = 256;
const GROUP_SMEM_MAX: usize = 200 << 10;
// a block may take at most 227 KiB on H100/H200
const _: () = assert!(GROUP_SMEM_MAX <= 227 << 10);
const GROUP_KERNELS: [&str; 3] = ["linear_groups", "expert_gate_up_groups", "expert_down_groups"];

/// Shared bytes of a group's `tokens` staged rows of `cols` for weights of
/// format `fmt`, or None above what the group kernels opt in to.
pub fn group_smem(fmt: i32, cols: usize, tokens: usize) -> Option<u32> {
    let e = chunk_values(fmt);
    let bytes = tokens * (cols / e * (e + 2) * 8);
    (bytes <= GROUP_SMEM_MAX).then_some(bytes as u32)
}

/// The tokens a `linear_groups` block stages for rows of `cols` (format
/// `fmt`) and their shared bytes: [`GROUP_TOKENS`], or half as many for
/// rows too wide for that; None where even those do not fit (the 8x8
/// tiles take the product).
fn linear_group_tokens(fmt: i32, cols: usize) -> Option<(usize, u32)> {
    [GROUP_TOKENS, GROUP_TOKENS / 2].into_iter().find_map(|t| Some((t, group_smem(fmt, cols, t)?)))
}

/// Rows and tokens of a prefill tile, the block of `linear_f32` and
/// `linear_grouped` (kernels/linear.cu `TILE_ROWS`, `TILE_TOKENS`; 8 warps).
const TILE_ROWS: usize = 8;
const TILE_TOKENS: usize = 8;
const TILE_BLOCK: u32 = 256;

/// Shared bytes of a prefill tile's window for weights of format `fmt`
/// (kernels/linear.cu `TILE_SMEM`: 8 tokens x 32 chunks of f64 values, two
/// padding values each, then the same activations as f32 in the staging
/// area they are copied into).
fn tile_smem(fmt: i32) -> u32 {
    let e = chunk_values(fmt);
    (TILE_TOKENS * 32 * ((e + 2) * 8 + e * 4)) as u32
}

/// The kernel and launch of a tiled product (`kernels`: its one-token and
/// prefill forms) of `n` tokens through `nrows` rows of format `fmt` in each
/// of `groups` groups: a tile of 4 rows and one token for decode, of
/// [`TILE_ROWS`] x [`TILE_TOKENS`] otherwise; the same sums either way.
fn tile_launch(
    kernels: [&'static str; 2],
    fmt: i32,
    n: usize,
    nrows: usize,
    groups: usize,
) -> (&'static str, LaunchConfig) {
    let (kernel, rows, tokens, block, smem) = if n == 1 {
        (kernels[0], 4, 1, 128, 0)
    } else {
        (kernels[1], TILE_ROWS, TILE_TOKENS, TILE_BLOCK, tile_smem(fmt))
    };
    let grid = (nrows.div_ceil(rows) as u32, n.div_ceil(tokens) as u32, groups as u32);
    (kernel, Gpu::cfg(grid, block, smem))
}

/// Shared bytes a decode kernel needs to stage one whole activation row of
/// `cols` for weights of format `fmt` (kernels/common.cuh `stage_row`:
/// f64 values, two padding values per chunk), or None above [`ROW_SMEM_MAX`].
pub fn row_smem(fmt: i32, cols: usize) -> Option<u32> {
    let e = chunk_values(fmt);
    let bytes = cols / e * (e + 2) * 8;
    (bytes <= ROW_SMEM_MAX).then_some(bytes as u32)
}

/// Warps per block of the decode products (kernels/linear.cu, moe.cu).
pub const DECODE_WARPS: usize = 4;

/// Staged-row bytes above which a decode product's block has twice
/// [`DECODE_WARPS`]: three such blocks fill an SM's shared memory (an FP8
/// row of 8192, `wo_b` at DSV4-Flash widths, stages 72 KiB).
const WIDE_ROW_SMEM: u32 = 48 << 10;

/// Rows each warp of a decode product over `rows` rows takes (4, 2 or 1) on
/// a device of `sm_count` SMs: the most that still gives every SM two
/// blocks, so that short matrices keep all SMs busy and tall ones read more
/// rows per staged activation.
fn rows_per_warp(rows: usize, sm_count: usize) -> usize {
    let want = 2 * sm_count * DECODE_WARPS;
    [4, 2].into_iter().find(|&r| rows / r >= want).unwrap_or(1)
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
        if let Some(why) = unavailable_reason() {
            bail!("GPU backend unavailable: {why}");
        }
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
        let ptx = nvrtc::ptx()?;
        let module = ctx
            .load_module(cudarc::nvrtc::Ptx::from_src(ptx))
            .map_err(|e| anyhow!("loading kernels on device {ordinal}: {e}"))?;
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
            let opt_in =
                if WHOLE_ROW_KERNELS.contains(&k) || LINEAR_T1_KERNELS.iter().any(|(_, names)| names.contains(&k)) {
                    Some(ROW_SMEM_MAX)
                } else if GROUP_KERNELS.contains(&k) {
                    Some(GROUP_SMEM_MAX)
                } else {
                    None
                };
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
        Ok(Gpu {
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
        })
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

    /// `y[n, rows] = x[n, cols] . w^T` over all of `w`'s rows (kernels/linear.cu).
    pub fn lin(&self, w: &super::weights::DevMat, x: u64, y: u64, n: usize) -> Result<()> {
        let (rows, cols) = (w.arg.rows as usize, w.arg.cols as usize);
        self.linear(w, x, cols, y, rows, n, 0, rows)
    }

    /// Rows `row0 .. row0 + nrows` of `w` applied to `n` inputs of stride
    /// `x_stride`, written at stride `y_stride`.
    #[allow(clippy::too_many_arguments)]
    pub fn linear(
        &self,
        w: &super::weights::DevMat,
        x: u64,
        x_stride: usize,
        y: u64,
        y_stride: usize,
        n: usize,
        row0: usize,
        nrows: usize,
    ) -> Result<()> {
        if n == 1 && self.decode_rows(w, None, x, 0, y, row0, 1, nrows)? {
            return Ok(());
        }
        if n > 1 && self.groups(w, x, x_stride, 0, y, y_stride, n, row0, 1, nrows)? {
            return Ok(());
        }
        let (kernel, cfg) = tile_launch(["linear_f32_t1", "linear_f32"], w.arg.fmt, n, nrows, 1);
        crate::launch!(self, kernel, cfg;
            w.arg, x, x_stride as i32, y, y_stride as i32, n as i32, row0 as i32, nrows as i32);
        Ok(())
    }

    /// `groups` products in one launch: group `z` applies rows
    /// `z*rows_per_group ..` of `w` to the inputs at `x + z*x_group` floats
    /// (stride `x_stride`) and writes `y + z*rows_per_group` (stride
    /// `y_stride`); each sum is `linear`'s.
    #[allow(clippy::too_many_arguments)]
    pub fn linear_grouped(
        &self,
        w: &super::weights::DevMat,
        x: u64,
        x_stride: usize,
        x_group: usize,
        y: u64,
        y_stride: usize,
        n: usize,
        groups: usize,
        rows_per_group: usize,
    ) -> Result<()> {
        if n == 1 && self.decode_rows(w, None, x, x_group, y, 0, groups, rows_per_group)? {
            return Ok(());
        }
        if n > 1 && self.groups(w, x, x_stride, x_group, y, y_stride, n, 0, groups, rows_per_group)? {
            return Ok(());
        }
        let (kernel, cfg) = tile_launch(["linear_grouped_t1", "linear_grouped"], w.arg.fmt, n, rows_per_group, groups);
        crate::launch!(self, kernel, cfg;
            w.arg, x, x_stride as i32, x_group as i32, y, y_stride as i32, n as i32, rows_per_group as i32);
        Ok(())
    }

    /// `y = w x` and `y2 = w2 x` (`lin` twice): for one token and two
    /// matrices of one format, width and exactness of scaled codes, one
    /// launch of the whole-row kernels (each sum is `lin`'s).
    pub fn lin_pair(
        &self,
        w: &super::weights::DevMat,
        w2: &super::weights::DevMat,
        x: u64,
        y: u64,
        y2: u64,
        n: usize,
    ) -> Result<()> {
        let (a, b) = (&w.arg, &w2.arg);
        let paired = n == 1 && a.fmt == b.fmt && a.cols == b.cols && a.scaled == b.scaled;
        if paired && self.decode_rows(w, Some((w2, y2)), x, 0, y, 0, 1, (a.rows + b.rows) as usize)? {
            return Ok(());
        }
        self.lin(w, x, y, n)?;
        self.lin(w2, x, y2, n)
    }

    /// Several tokens through rows `row0 + z*nrows ..` of `w` for each group
    /// `z` (as `linear_grouped`), by `linear_groups`: [`GROUP_TOKENS`]
    /// tokens staged whole a block, its warps walking the rows. Returns
    /// false (nothing launched) where the staged rows do not fit in shared
    /// memory (the 8x8 tiles take those). Rows too wide for [`GROUP_TOKENS`]
    /// staged rows (`wo_b`'s 8192 columns) take groups of half as many.
    #[allow(clippy::too_many_arguments)]
    fn groups(
        &self,
        w: &super::weights::DevMat,
        x: u64,
        x_stride: usize,
        x_group: usize,
        y: u64,
        y_stride: usize,
        n: usize,
        row0: usize,
        groups: usize,
        nrows: usize,
    ) -> Result<bool> {
        let Some((tokens, smem)) = linear_group_tokens(w.arg.fmt, w.arg.cols as usize) else {
            return Ok(false);
        };
        let token_groups = n.div_ceil(tokens);
        if token_groups > u16::MAX as usize {
            return Ok(false); // past the grid's y limit
        }
        // one block an SM: enough blocks along the rows for a wave when the
        // tokens are few, each warp keeping at least GROUP_ROWS rows
        let warps = GROUP_BLOCK as usize / 32;
        let blocks = self.sm_count.div_ceil(token_groups * groups).clamp(1, nrows.div_ceil(GROUP_ROWS * warps));
        let grid = (blocks as u32, token_groups as u32, groups as u32);
        crate::launch!(self, "linear_groups", Gpu::cfg(grid, GROUP_BLOCK, smem);
            w.arg, x, x_stride as i32, x_group as i32, y, y_stride as i32, n as i32, row0 as i32, nrows as i32,
            tokens as i32);
        Ok(true)
    }

    /// One token through rows `row0 .. row0 + nrows` of `w` for each of
    /// `groups` groups (as `linear_grouped`), by the whole-row kernels
    /// `linear_t1_r{1,2,4}`; with `pair` (one group, row0 0), rows from
    /// `w.rows` on are the pair matrix's, written to its output. Returns
    /// false (nothing launched) where the staged row does not fit in shared
    /// memory.
    #[allow(clippy::too_many_arguments)]
    fn decode_rows(
        &self,
        w: &super::weights::DevMat,
        pair: Option<(&super::weights::DevMat, u64)>,
        x: u64,
        x_group: usize,
        y: u64,
        row0: usize,
        groups: usize,
        nrows: usize,
    ) -> Result<bool> {
        let Some(smem) = row_smem(w.arg.fmt, w.arg.cols as usize) else {
            return Ok(false);
        };
        // without a pair, the second matrix is the first (never reached: na = nrows)
        let (w2, y2, na) = match pair {
            Some((w2, y2)) => (w2.arg, y2, w.arg.rows),
            None => (w.arg, y, nrows as i32),
        };
        let rpw = rows_per_warp(nrows * groups, self.sm_count);
        let kernel = *LINEAR_T1_KERNELS
            .iter()
            .find(|(rows, _)| *rows == rpw)
            .zip(usize::try_from(w.arg.fmt).ok())
            .and_then(|((_, names), f)| names.get(f))
            .ok_or_else(|| anyhow!("a decode product of weight format {}: no kernel for it", w.arg.fmt))?;
        // a row so wide that its staging limits an SM to a few blocks: twice
        // the warps share it
        let warps = if smem > WIDE_ROW_SMEM { 2 * DECODE_WARPS } else { DECODE_WARPS };
        // at most the blocks the SMs hold at once (the kernels loop over row groups)
        let block = (warps * 32) as u32;
        let fit = self.resident_grid(kernel, block, smem, groups)?;
        let grid = (nrows.div_ceil(warps * rpw).min(fit) as u32, 1, groups as u32);
        crate::launch!(self, kernel, Gpu::cfg(grid, block, smem);
            w.arg, w2, na, x, x_group as i32, y, y2, row0 as i32, nrows as i32);
        Ok(true)
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
    /// bytes) one SM holds at once, asked of the driver once per shape.
    fn resident_blocks(&self, kernel: &'static str, block: u32, smem: u32) -> Result<usize> {
        let mut cache = self.resident.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(&n) = cache.get(&(kernel, block, smem)) {
            return Ok(n as usize);
        }
        let n = self
            .func(kernel)?
            .occupancy_max_active_blocks_per_multiprocessor(block, smem as usize, None)
            .map_err(|e| anyhow!("device {}: occupancy of `{kernel}`: {e}", self.ordinal))?
            .max(1);
        cache.insert((kernel, block, smem), n);
        Ok(n as usize)
    }

    /// Blocks for each of `shares` grid slices (tokens, groups) that the
    /// whole device holds at once (at least one): the grid of a kernel
    /// whose blocks loop over their work.
    pub fn resident_grid(&self, kernel: &'static str, block: u32, smem: u32, shares: usize) -> Result<usize> {
        Ok((self.resident_blocks(kernel, block, smem)? * self.sm_count / shares).max(1))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_rows_per_warp_keep_two_blocks_per_sm() {
        // the H200 (132 SMs) at DeepSeek-V4-Flash widths
        assert_eq!(rows_per_warp(129280, 132), 4); // LM head
        assert_eq!(rows_per_warp(32768, 132), 4); // wq_b
        assert_eq!(rows_per_warp(8 * 1024, 132), 4); // wo_a, 8 groups
        assert_eq!(rows_per_warp(4096, 132), 2); // wo_b
        assert_eq!(rows_per_warp(2048, 132), 1); // shared expert w1
        assert_eq!(rows_per_warp(1024, 132), 1); // wq_a
        for (rows, sms) in [(129280, 132), (4096, 132), (5000, 16), (100, 132)] {
            let r = rows_per_warp(rows, sms);
            let blocks = rows.div_ceil(DECODE_WARPS * r);
            assert!(r == 1 || blocks >= 2 * sms, "{rows} rows on {sms} SMs: {r} per warp leaves {blocks} blocks");
        }
    }

    #[test]
    fn linear_t1_kernels_are_named_by_rows_and_format() {
        // each table entry is a LINEAR_T1 line of kernels/linear.cu with the
        // table's rows a warp and format, and is loaded (nvrtc::KERNELS)
        let src = include_str!("../../../../kernels/linear.cu");
        let fmts = ["FMT_F32", "FMT_BF16", "FMT_FP8", "FMT_FP4"];
        let mut defined = 0;
        for (rows, names) in LINEAR_T1_KERNELS {
            for (name, fmt) in names.into_iter().zip(fmts) {
                assert!(src.contains(&format!("LINEAR_T1({name}, {fmt}, {rows})\n")), "{name}");
                assert!(nvrtc::KERNELS.contains(&name), "{name} is not loaded");
                defined += 1;
            }
        }
        // and no other LINEAR_T1 kernel exists that the table would miss
        assert_eq!(src.matches("\nLINEAR_T1(").count(), defined);
        // the formats' numbers are Mat.fmt's (weights.rs, common.cuh)
        for (f, fmt) in fmts.iter().enumerate() {
            assert!(include_str!("../../../../kernels/common.cuh").contains(&format!("#define {fmt} {f}\n")));
        }
    }

    #[test]
    fn staged_row_bytes_follow_the_chunk_layout() {
        // FP4 row of 4096: 128 chunks of 32 f64 values, two padding values each
        assert_eq!(row_smem(3, 4096), Some(128 * 34 * 8));
        // BF16 row of 4096: 512 chunks of 8
        assert_eq!(row_smem(1, 4096), Some(512 * 10 * 8));
        assert_eq!(row_smem(2, 16 * 33), Some(33 * 18 * 8));
        // FP8 8192 (wo_b) fits with the opt-in, F32 16384 (192 KiB) does not
        assert_eq!(row_smem(2, 8192), Some(512 * 18 * 8));
        assert_eq!(row_smem(0, 16384), None);
    }

    #[test]
    fn prefill_tiles_follow_the_kernels_window() {
        let src = super::super::nvrtc::SOURCES.iter().find(|(n, _)| *n == "linear.cu").unwrap().1;
        assert!(src.contains(&format!("#define TILE_ROWS {TILE_ROWS}\n#define TILE_TOKENS {TILE_TOKENS}\n")));
        // 8 warps: 4 pairs of rows x 2 halves of the tokens
        assert_eq!(TILE_BLOCK as usize, 32 * (TILE_ROWS / 2) * (TILE_TOKENS / 4));
        assert!(src.contains("#define TILE_TOKEN(E) (32 * ((E) + 2))\n"));
        assert!(src.contains("#define TILE_SMEM(E) (TILE_TOKENS * TILE_TOKEN(E) + TILE_TOKENS * 32 * (E) / 2)\n"));
        // FP4: 8 tokens x 32 chunks of 32 f64 values and two padding values, and the 32 as f32
        assert_eq!(tile_smem(3), 8 * 32 * (34 * 8 + 32 * 4));
        assert_eq!(tile_smem(2), 8 * 32 * (18 * 8 + 16 * 4));
        // every format fits under the opt-in that both tile kernels take
        assert!((0..4).all(|f| tile_smem(f) as usize <= ROW_SMEM_MAX));
        assert!(["linear_f32", "linear_grouped"].iter().all(|k| WHOLE_ROW_KERNELS.contains(k)));
        // decode: 4 rows a block of 128; prefill: 8x8 tiles of 256 with the window's bytes
        let (k, c) = tile_launch(["one", "tiles"], 2, 1, 10, 3);
        assert_eq!((k, c.grid_dim, c.block_dim.0, c.shared_mem_bytes), ("one", (3, 1, 3), 128, 0));
        let (k, c) = tile_launch(["one", "tiles"], 2, 17, 10, 1);
        assert_eq!((k, c.grid_dim, c.block_dim.0, c.shared_mem_bytes), ("tiles", (2, 3, 1), 256, tile_smem(2)));
    }

    #[test]
    fn groups_follow_the_kernels() {
        let source = |name: &str| super::super::nvrtc::SOURCES.iter().find(|(n, _)| *n == name).unwrap().1;
        assert!(source("common.cuh").contains(&format!("#define GROUP_TOKENS {GROUP_TOKENS}\n")));
        let (moe, linear) = (source("moe.cu"), source("linear.cu"));
        assert!(source("common.cuh").contains(&format!("#define GROUP_ROWS {GROUP_ROWS}\n")));
        assert!(moe.contains(&format!("__launch_bounds__({GROUP_BLOCK}) expert_gate_up_groups(")));
        assert!(moe.contains(&format!("__launch_bounds__({GROUP_BLOCK}) expert_down_groups(")));
        assert!(linear.contains(&format!("__launch_bounds__({GROUP_BLOCK}) linear_groups(")));
        assert!(GROUP_KERNELS.iter().all(|k| super::super::nvrtc::KERNELS.contains(k)));
        // DeepSeek-V4-Flash: FP4 experts, 4 staged rows of 4096 (W1, W3) and of 2048 (W2)
        assert_eq!(group_smem(3, 4096, 4), Some(4 * 128 * 34 * 8));
        assert_eq!(group_smem(3, 2048, 4), Some(4 * 64 * 34 * 8));
        // FP8 `wo_b` (8192 columns) too wide for 4 tokens: groups of 2; the
        // fused arm keeps the per-pair kernels for experts too wide
        assert_eq!(group_smem(2, 4096, 4), Some(4 * 256 * 18 * 8));
        assert_eq!(group_smem(2, 8192, 4), None);
        assert_eq!(group_smem(2, 8192, 2), Some(2 * 512 * 18 * 8));
        assert_eq!(group_smem(0, 8192, 2), Some(2 * 2048 * 6 * 8));
        assert_eq!(group_smem(0, 16384, 2), None);
        // the dense products: 4 tokens where they fit, else 2, else the tiles
        assert_eq!(linear_group_tokens(2, 4096), Some((4, 4 * 256 * 18 * 8)));
        assert_eq!(linear_group_tokens(2, 8192), Some((2, 2 * 512 * 18 * 8)));
        assert_eq!(linear_group_tokens(0, 16384), None);
    }
}
