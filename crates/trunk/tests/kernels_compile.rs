//! Every kernel compiles with NVRTC for compute_90 and exports its entry
//! points. Needs libnvrtc (the GPU machine, or the `nvidia-cuda-nvrtc` wheel
//! that .ci/run installs); without it the test says so, and fails when
//! MEMRA_REQUIRE_NVRTC=1 (as in CI).

#[test]
fn kernels_compile_for_compute_90() {
    if !trunk::gpu::nvrtc::library_present("nvrtc") {
        let msg = "libnvrtc not found; kernels not compiled (set LD_LIBRARY_PATH to an NVRTC 13 library)";
        if std::env::var("MEMRA_REQUIRE_NVRTC").as_deref() == Ok("1") {
            panic!("{msg}");
        }
        eprintln!("SKIPPED: {msg}");
        return;
    }
    let ptx = trunk::gpu::nvrtc::ptx().unwrap();
    assert!(ptx.contains(".target sm_90"), "PTX not for compute_90");
    for k in trunk::gpu::nvrtc::KERNELS {
        assert!(ptx.contains(&format!(".entry {k}(")), "kernel `{k}` missing from the PTX");
    }
    // every kernel is launched with programmatic dependent launch
    // (gpu/device.rs `Gpu::launch`): each must wait for the kernel before
    // it (kernels/common.cuh `await_inputs`)
    for (k, body) in entries(ptx) {
        assert!(body.contains("griddepcontrol.wait"), "kernel `{k}` never waits for the kernel before it");
        assert!(body.contains("griddepcontrol.launch_dependents"), "kernel `{k}` never lets the next one start");
    }
    // and every entry point is one the engine loads (a kernel left off the
    // list fails only when first launched, on the GPU)
    for (k, _) in entries(ptx) {
        assert!(trunk::gpu::nvrtc::KERNELS.contains(&k), "kernel `{k}` is not in gpu/nvrtc.rs KERNELS");
    }
}

/// (name, text) of each `.entry` in the PTX, up to the next one.
fn entries(ptx: &str) -> impl Iterator<Item = (&str, &str)> {
    ptx.split(".entry ").skip(1).map(|e| (e.split('(').next().unwrap_or(""), e))
}

#[test]
fn the_entry_check_sees_a_kernel_without_the_wait() {
    let ptx =
        ".version 8.8\n.entry a(\n griddepcontrol.wait;\n griddepcontrol.launch_dependents;\n}\n.entry b(\n ret;\n}\n";
    let missing: Vec<&str> =
        entries(ptx).filter(|(_, body)| !body.contains("griddepcontrol.wait")).map(|(k, _)| k).collect();
    assert_eq!(missing, ["b"]);
}
