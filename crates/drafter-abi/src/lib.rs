//! drafter-abi: the versioned C ABI between the engine and drafter plugins.
//!
//! A drafter is a shared library exporting `memra_drafter_v1`, which returns
//! a pointer to a static [`DrafterApiV1`]. The engine loads it at run time
//! (no rebuild to swap drafters), checks `abi_version`, creates an instance
//! from a [`DrafterInitV1`], then per speculative step:
//!
//! 1. `commit(tokens, n, pos0, taps)`: the target has consumed `tokens` at
//!    positions `pos0..pos0+n` (the prompt, or an anchor and the drafts it
//!    accepted); `taps` holds, per row, the hyper-connection mean of each of
//!    the drafter's `tap_layers` concatenated (null when it asks for none);
//! 2. `propose(anchor, max, ids, conf)`: up to `max` draft tokens that follow
//!    `anchor` (the last token the target produced, not yet consumed), with a
//!    confidence in [0, 1] each (the probability the draft survives given the
//!    earlier ones did); returns how many.
//!
//! A drafter's own decode state is a set of `kvstate`-style cache classes,
//! exposed through `state_*` so that the engine snapshots, parks and
//! restores it together with its own. Errors return non-zero and leave a
//! message for `last_error`.
//!
//! This crate depends on nothing, so a third party can write a drafter
//! against it alone; [`export_drafter!`] generates the C shims from a Rust
//! type implementing [`Drafter`].

use std::ffi::{c_char, c_void};

/// The ABI version this crate describes.
pub const ABI_VERSION: u32 = 1;

/// The symbol every drafter library exports.
pub const ENTRY_SYMBOL: &[u8] = b"memra_drafter_v1";

/// What the engine tells a new drafter instance.
#[repr(C)]
pub struct DrafterInitV1 {
    pub abi_version: u32,
    pub vocab_size: u32,
    pub hidden_size: u32,
    /// Largest number of positions the session will reach.
    pub max_positions: u64,
    /// UTF-8, NUL-terminated: the checkpoint directory (drafter weights); may be null.
    pub model_dir: *const c_char,
    /// UTF-8, NUL-terminated JSON of drafter options (e.g. a replay file); may be null.
    pub options_json: *const c_char,
    /// CUDA driver handles when the engine runs on a GPU; null on the CPU.
    pub cu_context: *mut c_void,
    pub cu_stream: *mut c_void,
    pub device_ordinal: i32,
    /// The engine's shared embedding `[vocab, hidden]` and LM head, as f32 on
    /// the host, or null. The memra CLI passes null today: no shipped drafter
    /// reads them (DSpark loads both from `model_dir`).
    pub embed_f32: *const f32,
    pub head_f32: *const f32,
}

/// The table a drafter exports. Every function pointer is required.
#[repr(C)]
pub struct DrafterApiV1 {
    pub abi_version: u32,
    /// UTF-8, NUL-terminated, static.
    pub name: *const c_char,
    pub create: unsafe extern "C" fn(init: *const DrafterInitV1, err: *mut c_char, err_len: usize) -> *mut c_void,
    pub destroy: unsafe extern "C" fn(h: *mut c_void),
    pub last_error: unsafe extern "C" fn(h: *mut c_void, buf: *mut c_char, len: usize) -> usize,
    /// The target layers whose output the drafter reads, as the mean over the
    /// hyper-connection streams; each committed row's taps are these means
    /// concatenated in this order (`len * hidden_size` floats).
    pub tap_layers: unsafe extern "C" fn(h: *mut c_void, out: *mut u32, max: usize) -> usize,
    pub commit: unsafe extern "C" fn(h: *mut c_void, tokens: *const u32, n: usize, pos0: u64, taps: *const f32) -> i32,
    pub propose: unsafe extern "C" fn(h: *mut c_void, anchor: u32, max: usize, ids: *mut u32, conf: *mut f32) -> isize,
    /// JSON of the state layout (`{"classes":[{"name","row_width","elem","rule"}]}`), NUL-terminated, owned by the instance.
    pub state_layout: unsafe extern "C" fn(h: *mut c_void) -> *const c_char,
    pub state_positions: unsafe extern "C" fn(h: *mut c_void) -> u64,
    pub state_capacity: unsafe extern "C" fn(h: *mut c_void) -> u64,
    pub state_written: unsafe extern "C" fn(h: *mut c_void, class: usize) -> u64,
    /// Copy class `class`'s live rows, oldest first, into `buf` (`len` bytes exactly).
    pub state_read: unsafe extern "C" fn(h: *mut c_void, class: usize, buf: *mut u8, len: usize) -> i32,
    /// Set class `class`'s counter to `written` and its live rows from `buf`.
    pub state_write:
        unsafe extern "C" fn(h: *mut c_void, class: usize, written: u64, buf: *const u8, len: usize) -> i32,
    pub state_set_positions: unsafe extern "C" fn(h: *mut c_void, positions: u64),
}

// SAFETY: the table is immutable static data (function pointers and a
// pointer to a static string).
unsafe impl Sync for DrafterApiV1 {}

/// What `export_drafter!` needs from a Rust drafter.
pub trait Drafter: Sized {
    /// # Safety of pointers
    /// `init`'s pointers are valid for the call (embedding/head for the
    /// instance's life, as the engine keeps its weights alive).
    fn create(init: &DrafterInitV1) -> Result<Self, String>;
    fn tap_layers(&self) -> Vec<u32> {
        Vec::new()
    }
    /// `taps`: `tokens.len() * tap_width` floats, or empty.
    fn commit(&mut self, tokens: &[u32], pos0: u64, taps: &[f32]) -> Result<(), String>;
    /// Fill `ids`/`conf` (length = max) and return how many were proposed.
    fn propose(&mut self, anchor: u32, ids: &mut [u32], conf: &mut [f32]) -> Result<usize, String>;
    /// State classes as a layout JSON string (empty layout when stateless).
    fn state_layout(&self) -> String {
        "{\"classes\":[]}".to_string()
    }
    fn state_positions(&self) -> u64 {
        0
    }
    fn state_capacity(&self) -> u64 {
        0
    }
    fn state_written(&self, _class: usize) -> u64 {
        0
    }
    fn state_read(&self, _class: usize, _buf: &mut [u8]) -> Result<(), String> {
        Err("stateless drafter".into())
    }
    fn state_write(&mut self, _class: usize, _written: u64, _buf: &[u8]) -> Result<(), String> {
        Err("stateless drafter".into())
    }
    fn state_set_positions(&mut self, _positions: u64) {}
    /// Floats per tapped row (`tap_layers().len() * hidden_size`).
    fn tap_width(&self) -> usize {
        0
    }
}

/// Instance wrapper used by the generated shims.
#[doc(hidden)]
pub struct Instance<D> {
    pub drafter: D,
    pub error: String,
    pub layout: std::ffi::CString,
}

/// Copy `msg` into `buf` as a NUL-terminated string, truncated to fit;
/// returns the full message length.
///
/// # Safety
/// `buf` is null or points to `len` writable bytes.
#[doc(hidden)]
pub unsafe fn write_cstr(msg: &str, buf: *mut c_char, len: usize) -> usize {
    if buf.is_null() || len == 0 {
        return msg.len();
    }
    let n = msg.len().min(len - 1);
    // SAFETY: the caller gives `len` writable bytes.
    unsafe {
        std::ptr::copy_nonoverlapping(msg.as_ptr() as *const c_char, buf, n);
        *buf.add(n) = 0;
    }
    msg.len()
}

/// `f`'s result, or an error where it panicked: a panic must not unwind
/// out of an `extern "C"` entry point, which would abort the engine's
/// process.
#[doc(hidden)]
pub fn caught<T>(f: impl FnOnce() -> Result<T, String>) -> Result<T, String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|p| {
        let msg = p.downcast_ref::<&str>().map(|s| s.to_string()).or_else(|| p.downcast_ref::<String>().cloned());
        Err(format!("the drafter panicked: {}", msg.as_deref().unwrap_or("(no message)")))
    })
}

/// Export a [`Drafter`] implementation as `memra_drafter_v1`.
#[macro_export]
macro_rules! export_drafter {
    ($ty:ty) => {
        mod __memra_drafter_exports {
            use super::*;
            use std::ffi::{c_char, c_void};
            use $crate::{Drafter, DrafterApiV1, DrafterInitV1, Instance};
            type I = Instance<$ty>;

            unsafe extern "C" fn create(init: *const DrafterInitV1, err: *mut c_char, err_len: usize) -> *mut c_void {
                let init = &*init;
                if init.abi_version != $crate::ABI_VERSION {
                    $crate::write_cstr(
                        &format!(
                            "drafter ABI {} requested, this drafter implements {}",
                            init.abi_version,
                            $crate::ABI_VERSION
                        ),
                        err,
                        err_len,
                    );
                    return std::ptr::null_mut();
                }
                match $crate::caught(|| <$ty as Drafter>::create(init)) {
                    Ok(d) => {
                        let layout = std::ffi::CString::new(d.state_layout()).unwrap_or_default();
                        Box::into_raw(Box::new(I { drafter: d, error: String::new(), layout })) as *mut c_void
                    }
                    Err(e) => {
                        $crate::write_cstr(&e, err, err_len);
                        std::ptr::null_mut()
                    }
                }
            }
            unsafe extern "C" fn destroy(h: *mut c_void) {
                if !h.is_null() {
                    drop(Box::from_raw(h as *mut I));
                }
            }
            unsafe extern "C" fn last_error(h: *mut c_void, buf: *mut c_char, len: usize) -> usize {
                $crate::write_cstr(&(*(h as *mut I)).error, buf, len)
            }
            unsafe extern "C" fn tap_layers(h: *mut c_void, out: *mut u32, max: usize) -> usize {
                let v = (*(h as *mut I)).drafter.tap_layers();
                for (i, x) in v.iter().take(max).enumerate() {
                    *out.add(i) = *x;
                }
                v.len()
            }
            unsafe extern "C" fn commit(
                h: *mut c_void,
                tokens: *const u32,
                n: usize,
                pos0: u64,
                taps: *const f32,
            ) -> i32 {
                let i = &mut *(h as *mut I);
                let toks = std::slice::from_raw_parts(tokens, n);
                let tw = i.drafter.tap_width();
                let taps = if taps.is_null() || tw == 0 { &[][..] } else { std::slice::from_raw_parts(taps, n * tw) };
                match $crate::caught(|| i.drafter.commit(toks, pos0, taps)) {
                    Ok(()) => 0,
                    Err(e) => {
                        i.error = e;
                        1
                    }
                }
            }
            unsafe extern "C" fn propose(
                h: *mut c_void,
                anchor: u32,
                max: usize,
                ids: *mut u32,
                conf: *mut f32,
            ) -> isize {
                let i = &mut *(h as *mut I);
                let ids = std::slice::from_raw_parts_mut(ids, max);
                let conf = std::slice::from_raw_parts_mut(conf, max);
                match $crate::caught(|| i.drafter.propose(anchor, ids, conf)) {
                    Ok(n) => n.min(max) as isize,
                    Err(e) => {
                        i.error = e;
                        -1
                    }
                }
            }
            unsafe extern "C" fn state_layout(h: *mut c_void) -> *const c_char {
                (*(h as *mut I)).layout.as_ptr()
            }
            unsafe extern "C" fn state_positions(h: *mut c_void) -> u64 {
                (*(h as *mut I)).drafter.state_positions()
            }
            unsafe extern "C" fn state_capacity(h: *mut c_void) -> u64 {
                (*(h as *mut I)).drafter.state_capacity()
            }
            unsafe extern "C" fn state_written(h: *mut c_void, class: usize) -> u64 {
                (*(h as *mut I)).drafter.state_written(class)
            }
            unsafe extern "C" fn state_read(h: *mut c_void, class: usize, buf: *mut u8, len: usize) -> i32 {
                let i = &mut *(h as *mut I);
                let buf = std::slice::from_raw_parts_mut(buf, len);
                match $crate::caught(|| i.drafter.state_read(class, buf)) {
                    Ok(()) => 0,
                    Err(e) => {
                        i.error = e;
                        1
                    }
                }
            }
            unsafe extern "C" fn state_write(
                h: *mut c_void,
                class: usize,
                written: u64,
                buf: *const u8,
                len: usize,
            ) -> i32 {
                let i = &mut *(h as *mut I);
                let buf = std::slice::from_raw_parts(buf, len);
                match $crate::caught(|| i.drafter.state_write(class, written, buf)) {
                    Ok(()) => 0,
                    Err(e) => {
                        i.error = e;
                        1
                    }
                }
            }
            unsafe extern "C" fn state_set_positions(h: *mut c_void, positions: u64) {
                (*(h as *mut I)).drafter.state_set_positions(positions)
            }

            static NAME: &str = concat!(stringify!($ty), "\0");
            static API: DrafterApiV1 = DrafterApiV1 {
                abi_version: $crate::ABI_VERSION,
                name: NAME.as_ptr() as *const c_char,
                create,
                destroy,
                last_error,
                tap_layers,
                commit,
                propose,
                state_layout,
                state_positions,
                state_capacity,
                state_written,
                state_read,
                state_write,
                state_set_positions,
            };

            #[no_mangle]
            pub extern "C" fn memra_drafter_v1() -> *const DrafterApiV1 {
                &API
            }
        }
    };
}
