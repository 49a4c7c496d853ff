//! A drafter that panics inside an entry point returns an error to the
//! engine (its message through `last_error`) instead of unwinding out of an
//! `extern "C"` function, which aborts the engine's process.

use std::ffi::{c_char, CStr};

use drafter_abi::{export_drafter, Drafter, DrafterInitV1, ABI_VERSION};

struct Panicky;

impl Drafter for Panicky {
    fn create(init: &DrafterInitV1) -> Result<Self, String> {
        if init.vocab_size == 0 {
            panic!("create: no vocabulary");
        }
        Ok(Panicky)
    }
    fn commit(&mut self, tokens: &[u32], _pos0: u64, _taps: &[f32]) -> Result<(), String> {
        let _ = tokens[tokens.len()]; // out of bounds
        Ok(())
    }
    fn propose(&mut self, _anchor: u32, _ids: &mut [u32], _conf: &mut [f32]) -> Result<usize, String> {
        Ok(0)
    }
}

export_drafter!(Panicky);

#[test]
fn a_panic_is_an_error_not_an_abort() {
    // SAFETY: the table is static; every call below follows the ABI.
    let api = unsafe { &*__memra_drafter_exports::memra_drafter_v1() };
    let mut init = DrafterInitV1 {
        abi_version: ABI_VERSION,
        vocab_size: 0,
        hidden_size: 8,
        max_positions: 16,
        model_dir: std::ptr::null(),
        options_json: std::ptr::null(),
        cu_context: std::ptr::null_mut(),
        cu_stream: std::ptr::null_mut(),
        device_ordinal: -1,
        embed_f32: std::ptr::null(),
        head_f32: std::ptr::null(),
    };
    let mut err = vec![0 as c_char; 256];
    let h = unsafe { (api.create)(&init, err.as_mut_ptr(), err.len()) };
    assert!(h.is_null());
    let msg = unsafe { CStr::from_ptr(err.as_ptr()) }.to_string_lossy().into_owned();
    assert!(msg.contains("panicked") && msg.contains("no vocabulary"), "{msg}");

    init.vocab_size = 32;
    let h = unsafe { (api.create)(&init, err.as_mut_ptr(), err.len()) };
    assert!(!h.is_null());
    let tokens = [1u32, 2];
    assert_eq!(unsafe { (api.commit)(h, tokens.as_ptr(), tokens.len(), 0, std::ptr::null()) }, 1);
    let n = unsafe { (api.last_error)(h, err.as_mut_ptr(), err.len()) };
    let msg = unsafe { CStr::from_ptr(err.as_ptr()) }.to_string_lossy().into_owned();
    assert!(n > 0 && msg.contains("panicked") && msg.contains("out of bounds"), "{msg}");
    unsafe { (api.destroy)(h) };
}
