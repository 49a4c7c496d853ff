//! Drafter plugins: shared libraries implementing `drafter-abi`, loaded at
//! run time with `libloading`. The engine never links a drafter; swapping
//! one needs no rebuild. A drafter's state is exposed as kvstate classes
//! (`StateStore`), so it snapshots, parks and restores with the trunk's.

use std::ffi::{c_char, c_void, CStr, CString};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{anyhow, bail, Context, Result};
use drafter_abi::{DrafterApiV1, DrafterInitV1, ABI_VERSION, ENTRY_SYMBOL};
use kvstate::{Layout, StateError, StateStore};

/// A loaded drafter library.
pub struct DrafterPlugin {
    _lib: libloading::Library,
    api: *const DrafterApiV1,
    pub path: PathBuf,
    pub name: String,
}

// SAFETY: the API table is static, immutable data inside the loaded library,
// which `_lib` keeps loaded for as long as the plugin lives.
unsafe impl Send for DrafterPlugin {}
unsafe impl Sync for DrafterPlugin {}

impl DrafterPlugin {
    pub fn load(path: &Path) -> Result<Arc<DrafterPlugin>> {
        // SAFETY: loading a library runs its initializers; drafters are code
        // the user chose to run.
        let lib = unsafe { libloading::Library::new(path) }
            .with_context(|| format!("{}: cannot load drafter library", path.display()))?;
        // SAFETY: the symbol's type is fixed by the ABI; its absence is an error.
        let entry: libloading::Symbol<unsafe extern "C" fn() -> *const DrafterApiV1> = unsafe { lib.get(ENTRY_SYMBOL) }
            .map_err(|_| {
                anyhow!(
                    "{}: not a memra drafter: no symbol `{}`",
                    path.display(),
                    String::from_utf8_lossy(ENTRY_SYMBOL)
                )
            })?;
        // SAFETY: calling the exported entry point, which returns a static table.
        let api = unsafe { entry() };
        if api.is_null() {
            bail!("{}: `memra_drafter_v1` returned no table", path.display());
        }
        // SAFETY: non-null pointer to the library's static table.
        let version = unsafe { (*api).abi_version };
        if version != ABI_VERSION {
            bail!("{}: drafter ABI version {version}, this engine speaks version {ABI_VERSION}", path.display());
        }
        // SAFETY: `name` is a static NUL-terminated string per the ABI.
        let name = unsafe { CStr::from_ptr((*api).name) }.to_string_lossy().into_owned();
        Ok(Arc::new(DrafterPlugin { _lib: lib, api, path: path.to_path_buf(), name }))
    }

    fn api(&self) -> &DrafterApiV1 {
        // SAFETY: checked non-null at load; static for the library's life.
        unsafe { &*self.api }
    }
}

/// What the engine gives a drafter at creation.
pub struct DrafterSetup<'a> {
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub max_positions: usize,
    pub model_dir: Option<&'a Path>,
    pub options_json: Option<&'a str>,
    pub embed_f32: Option<&'a [f32]>,
    pub head_f32: Option<&'a [f32]>,
    /// The device the engine's last layers run on (where the taps come
    /// from), or None on the CPU. The drafter opens that device's primary
    /// context itself; no context or stream handle is passed.
    pub device: Option<usize>,
}

/// A drafter instance.
pub struct Drafter {
    plugin: Arc<DrafterPlugin>,
    h: *mut c_void,
    pub tap_layers: Vec<usize>,
    hidden: usize,
    layout: Arc<Layout>,
}

// SAFETY: an instance is used from one thread at a time through &mut self.
unsafe impl Send for Drafter {}

impl Drafter {
    pub fn new(plugin: Arc<DrafterPlugin>, s: &DrafterSetup) -> Result<Drafter> {
        let dir = s.model_dir.map(|p| CString::new(p.to_string_lossy().as_bytes())).transpose()?;
        let opts = s.options_json.map(CString::new).transpose()?;
        let init = DrafterInitV1 {
            abi_version: ABI_VERSION,
            vocab_size: s.vocab_size as u32,
            hidden_size: s.hidden_size as u32,
            max_positions: s.max_positions as u64,
            model_dir: dir.as_ref().map_or(std::ptr::null(), |c| c.as_ptr()),
            options_json: opts.as_ref().map_or(std::ptr::null(), |c| c.as_ptr()),
            cu_context: std::ptr::null_mut(),
            cu_stream: std::ptr::null_mut(),
            device_ordinal: s.device.map_or(-1, |d| d as i32),
            embed_f32: s.embed_f32.map_or(std::ptr::null(), |e| e.as_ptr()),
            head_f32: s.head_f32.map_or(std::ptr::null(), |e| e.as_ptr()),
        };
        let mut err = vec![0 as c_char; 1024];
        // SAFETY: `init` and its strings live through the call; `err` has room.
        let h = unsafe { (plugin.api().create)(&init, err.as_mut_ptr(), err.len()) };
        if h.is_null() {
            // SAFETY: the drafter NUL-terminated its message within `err`.
            let msg = unsafe { CStr::from_ptr(err.as_ptr()) }.to_string_lossy().into_owned();
            bail!("{} ({}): {msg}", plugin.name, plugin.path.display());
        }
        let mut taps = vec![0u32; 16];
        // SAFETY: `taps` has 16 slots; `h` is a live instance.
        let n = unsafe { (plugin.api().tap_layers)(h, taps.as_mut_ptr(), taps.len()) };
        if n > taps.len() {
            // its commits would read n layers' taps from rows of 16
            // SAFETY: `h` came from this plugin's `create` and is not used again.
            unsafe { (plugin.api().destroy)(h) };
            bail!(
                "{} ({}): taps {n} layers, the engine passes at most {}",
                plugin.name,
                plugin.path.display(),
                taps.len()
            );
        }
        // SAFETY: the layout string is owned by the instance and NUL-terminated.
        let lj = unsafe { CStr::from_ptr((plugin.api().state_layout)(h)) }.to_string_lossy().into_owned();
        let layout: Layout = serde_json::from_str(&lj)
            .with_context(|| format!("{}: the drafter's state layout is not a kvstate layout: {lj}", plugin.name))?;
        Ok(Drafter {
            tap_layers: taps[..n].iter().map(|&t| t as usize).collect(),
            hidden: s.hidden_size,
            layout: Arc::new(layout),
            plugin,
            h,
        })
    }

    pub fn name(&self) -> &str {
        &self.plugin.name
    }

    fn error(&self) -> String {
        let mut buf = vec![0 as c_char; 1024];
        // SAFETY: live instance; buffer of the given length.
        unsafe { (self.plugin.api().last_error)(self.h, buf.as_mut_ptr(), buf.len()) };
        // SAFETY: NUL-terminated by the drafter.
        unsafe { CStr::from_ptr(buf.as_ptr()) }.to_string_lossy().into_owned()
    }

    /// The target consumed `tokens` at positions `pos0..`; `taps` holds
    /// `tokens.len() * tap_layers.len() * hidden` floats (empty without taps).
    pub fn commit(&mut self, tokens: &[u32], pos0: usize, taps: &[f32]) -> Result<()> {
        let want = tokens.len() * self.tap_layers.len() * self.hidden;
        if taps.len() != want {
            bail!("drafter `{}` needs {want} tap values for {} tokens, got {}", self.name(), tokens.len(), taps.len());
        }
        let tp = if taps.is_empty() { std::ptr::null() } else { taps.as_ptr() };
        // SAFETY: pointers valid for the given lengths during the call.
        let rc = unsafe { (self.plugin.api().commit)(self.h, tokens.as_ptr(), tokens.len(), pos0 as u64, tp) };
        if rc != 0 {
            bail!("drafter `{}`: commit failed: {}", self.name(), self.error());
        }
        Ok(())
    }

    /// Up to `max` draft tokens after `anchor`, with confidences.
    pub fn propose(&mut self, anchor: u32, max: usize) -> Result<(Vec<u32>, Vec<f32>)> {
        let mut ids = vec![0u32; max];
        let mut conf = vec![0f32; max];
        // SAFETY: buffers of `max` elements.
        let n = unsafe { (self.plugin.api().propose)(self.h, anchor, max, ids.as_mut_ptr(), conf.as_mut_ptr()) };
        if n < 0 {
            bail!("drafter `{}`: propose failed: {}", self.name(), self.error());
        }
        ids.truncate(n as usize);
        conf.truncate(n as usize);
        Ok((ids, conf))
    }
}

impl Drop for Drafter {
    fn drop(&mut self) {
        // SAFETY: `h` came from this plugin's `create` and is destroyed once.
        unsafe { (self.plugin.api().destroy)(self.h) }
    }
}

impl StateStore for Drafter {
    fn layout(&self) -> &Arc<Layout> {
        &self.layout
    }
    fn capacity(&self) -> usize {
        // SAFETY: live instance.
        unsafe { (self.plugin.api().state_capacity)(self.h) as usize }
    }
    fn positions(&self) -> usize {
        // SAFETY: live instance.
        unsafe { (self.plugin.api().state_positions)(self.h) as usize }
    }
    fn set_positions(&mut self, positions: usize) {
        // SAFETY: live instance.
        unsafe { (self.plugin.api().state_set_positions)(self.h, positions as u64) }
    }
    fn written(&self, class: usize) -> u64 {
        // SAFETY: live instance.
        unsafe { (self.plugin.api().state_written)(self.h, class) }
    }
    fn truncate(&mut self, class: usize, written: u64) -> Result<(), StateError> {
        // rows stay where they are: rewrite the live rows under the smaller counter
        let spec = self.layout.classes[class].clone();
        let rows = spec.rule.rows_for(self.capacity());
        let now = self.written(class);
        if written > now {
            return Err(StateError::Format(format!("class `{}`: cannot rewind forward", spec.name)));
        }
        let live_now = self.live_rows(class);
        let mut buf = vec![0u8; live_now * spec.row_bytes()];
        self.read_live(class, &mut buf)?;
        let live_after = match spec.rule {
            kvstate::CapacityRule::Ring { .. } => (written as usize).min(rows),
            _ => written as usize,
        };
        let drop = (now - written) as usize;
        let keep_end = live_now.saturating_sub(drop);
        let start = keep_end.saturating_sub(live_after);
        let bytes = buf[start * spec.row_bytes()..keep_end * spec.row_bytes()].to_vec();
        if bytes.len() != live_after * spec.row_bytes() {
            return Err(StateError::Format(format!(
                "class `{}`: a rewind past the ring's live rows cannot be expressed",
                spec.name
            )));
        }
        self.write_live(class, written, &bytes)
    }
    fn read_live(&self, class: usize, out: &mut [u8]) -> Result<(), StateError> {
        // SAFETY: `out` has `len` writable bytes.
        let rc = unsafe { (self.plugin.api().state_read)(self.h, class, out.as_mut_ptr(), out.len()) };
        if rc != 0 {
            return Err(StateError::Format(format!("drafter `{}`: {}", self.name(), self.error())));
        }
        Ok(())
    }
    fn write_live(&mut self, class: usize, written: u64, rows: &[u8]) -> Result<(), StateError> {
        // SAFETY: `rows` is readable for its length during the call.
        let rc = unsafe { (self.plugin.api().state_write)(self.h, class, written, rows.as_ptr(), rows.len()) };
        if rc != 0 {
            return Err(StateError::Format(format!("drafter `{}`: {}", self.name(), self.error())));
        }
        Ok(())
    }
}
