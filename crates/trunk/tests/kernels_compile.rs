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
    // a decode step's weight loads are evicted from L2 first, the prefill
    // groups' are not
    assert_eq!(entries(ptx).filter(|(k, _)| reads_weights_once(k)).count(), 14, "the decode products' kernels");
    assert_eq!(weight_policy_misplaced(ptx), Vec::<&str>::new(), "kernels with the wrong weight loads");
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

/// Kernels that read each weight once a decode step: the one-token
/// products (the LM head among them) and the routed experts' decode
/// kernels.
fn reads_weights_once(kernel: &str) -> bool {
    kernel.starts_with("linear_t1_") || kernel == "expert_gate_up" || kernel == "expert_down"
}

/// The kernels whose weight loads break kernels/common.cuh's rule: a
/// decode product's without the L2 evict-first policy (`stream_policy`),
/// or a prefill group kernel's with it (its blocks read the same rows for
/// other tokens).
fn weight_policy_misplaced(ptx: &str) -> Vec<&str> {
    entries(ptx)
        .filter(|(k, body)| {
            let hinted = body.contains("createpolicy.fractional.L2::evict_first") && body.contains(".L2::cache_hint");
            (reads_weights_once(k) && !hinted) || (k.ends_with("_groups") && hinted)
        })
        .map(|(k, _)| k)
        .collect()
}

#[test]
fn the_policy_check_sees_a_plain_decode_load_and_a_hinted_group() {
    let hinted = "createpolicy.fractional.L2::evict_first.b64 %rd1, 1.0;\n ld.global.L2::cache_hint.v4.u32";
    let plain = "ld.global.v4.u32";
    let ptx = format!(
        ".entry linear_t1_r4_fp8(\n{hinted}\n}}\n.entry expert_down(\n{plain}\n}}\n\
         .entry linear_groups(\n{hinted}\n}}\n.entry expert_down_groups(\n{plain}\n}}\n"
    );
    assert_eq!(weight_policy_misplaced(&ptx), ["expert_down", "linear_groups"]);
}

#[test]
fn the_entry_check_sees_a_kernel_without_the_wait() {
    let ptx =
        ".version 8.8\n.entry a(\n griddepcontrol.wait;\n griddepcontrol.launch_dependents;\n}\n.entry b(\n ret;\n}\n";
    let missing: Vec<&str> =
        entries(ptx).filter(|(_, body)| !body.contains("griddepcontrol.wait")).map(|(k, _)| k).collect();
    assert_eq!(missing, ["b"]);
}
