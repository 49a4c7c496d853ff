//! Every kernel compiles with NVRTC, to PTX for compute_90 and to machine
//! code for sm_90, and exports its entry points. Needs libnvrtc (the GPU machine, or the `nvidia-cuda-nvrtc` wheel
//! that .ci/run installs); without it the test says so, and fails when
//! MEMRA_REQUIRE_NVRTC=1 (as in CI).

use sha2::{Digest, Sha256};

/// Whether NVRTC can be loaded; without it, a skip (or a failure when
/// MEMRA_REQUIRE_NVRTC=1).
fn nvrtc_present() -> bool {
    if trunk::gpu::nvrtc::library_present("nvrtc") {
        return true;
    }
    let msg = "libnvrtc not found; kernels not compiled (set LD_LIBRARY_PATH to an NVRTC 13 library)";
    if std::env::var("MEMRA_REQUIRE_NVRTC").as_deref() == Ok("1") {
        panic!("{msg}");
    }
    eprintln!("SKIPPED: {msg}");
    false
}

/// The machine code the GPU forward loads: an ELF image for the CUDA
/// machine that defines every entry point, and a clear refusal for a
/// device older than the kernels need.
#[test]
fn kernels_compile_to_sm_90_machine_code() {
    if !nvrtc_present() {
        return;
    }
    let image = trunk::gpu::nvrtc::cubin(9, 0).unwrap();
    // kept between processes in the cache directory, after its SHA-256
    if let Some(kept) = trunk::gpu::nvrtc::kept_cubin_path(9, 0).unwrap() {
        let bytes = std::fs::read(&kept).unwrap_or_else(|e| panic!("the image is not kept at {}: {e}", kept.display()));
        assert!(bytes.len() > 32 && bytes[32..] == image[..], "{} does not hold the image", kept.display());
        assert_eq!(
            bytes[..32],
            Sha256::digest(&image[..])[..],
            "{}'s header is not the image's SHA-256",
            kept.display()
        );
    }
    assert_eq!(&image[..4], b"\x7fELF", "the cubin is not an ELF image");
    assert_eq!(u16::from_le_bytes([image[18], image[19]]), 190, "the ELF image is not for the CUDA machine");
    // the target architecture, in bits 8-15 of the ELF header's flags (the
    // layout NVRTC 13 writes: 0x5a for sm_90, 0x64 for sm_100)
    assert_eq!(image[49], 90, "the cubin is not for sm_90");
    for k in trunk::gpu::nvrtc::KERNELS {
        let symbol = format!("\0{k}\0");
        assert!(image.windows(symbol.len()).any(|w| w == symbol.as_bytes()), "kernel `{k}` missing from the cubin");
    }
    assert!(std::sync::Arc::ptr_eq(&image, &trunk::gpu::nvrtc::cubin(9, 0).unwrap()), "compiled twice");
    let old = trunk::gpu::nvrtc::cubin(8, 0).unwrap_err().to_string();
    assert!(old.contains("8.0") && old.contains("9.0"), "{old}");
}

#[test]
fn kernels_compile_for_compute_90() {
    if !nvrtc_present() {
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
    // and no thread leaves, or writes memory another kernel may use, before
    // it has waited: a kernel whose blocks could all finish without waiting
    // would let the kernel after it run beside the one before, and a store
    // before the wait races with the kernel before
    assert_eq!(unwaited_kernels(ptx), Vec::<(&str, &str)>::new(), "kernels that leave or write before they wait");
    // a decode step's weight loads are evicted from L2 first, the prefill
    // groups' are not
    let streaming = trunk::gpu::weight_streaming_kernels();
    for k in &streaming {
        assert!(entries(ptx).any(|(e, _)| e == *k), "`{k}` (gpu::weight_streaming_kernels) is not in the PTX");
    }
    assert_eq!(weight_policy_misplaced(ptx, &streaming), Vec::<&str>::new(), "kernels with the wrong weight loads");
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

/// (kernel, instruction) for each entry of the PTX with an [`unwaited`]
/// instruction.
fn unwaited_kernels(ptx: &str) -> Vec<(&str, &str)> {
    entries(ptx).filter_map(|(k, body)| unwaited(body).map(|w| (k, w))).collect()
}

/// The first instruction that some path through an entry's PTX reaches
/// before it passes `griddepcontrol.wait` and that must come after it:
/// `ret` (or the end of the body: the thread leaves without waiting), or
/// a store, atomic, reduction or bulk copy to global memory (it may race
/// with the kernel before, which can still be reading or writing there;
/// shared and local memory are the block's own). The body's labels, branches
/// (`bra`, conditional where predicated), returns and global writes as a
/// control flow graph, walked from the first instruction and stopped at
/// each wait (a predicated wait does not stop it: some threads skip it).
fn unwaited(body: &str) -> Option<&str> {
    enum Step<'a> {
        Label(&'a str),
        Wait,
        Branch {
            to: &'a str,
            conditional: bool,
        },
        /// a return or a global write, predicated or not: some thread may take it
        Unwaited(&'a str),
    }
    let steps: Vec<Step> = body
        .lines()
        .map(str::trim)
        .filter_map(|l| {
            let conditional = l.starts_with('@');
            let op =
                if conditional { l.split_once(char::is_whitespace).map_or("", |(_, r)| r.trim_start()) } else { l };
            let global_write =
                ["st.global", "atom.global", "red.global", "cp.async.bulk.global", "cp.reduce.async.bulk.global"]
                    .iter()
                    .any(|w| op.starts_with(w));
            if l.starts_with("$L") && l.ends_with(':') {
                Some(Step::Label(l.trim_end_matches(':')))
            } else if op.starts_with("griddepcontrol.wait") && !conditional {
                Some(Step::Wait)
            } else if op.starts_with("bra") {
                let to = op.split_whitespace().nth(1)?.trim_end_matches(';');
                Some(Step::Branch { to, conditional })
            } else if op.starts_with("ret") || op.starts_with("exit") || global_write {
                Some(Step::Unwaited(l))
            } else {
                None
            }
        })
        .collect();
    let labels: std::collections::HashMap<&str, usize> = steps
        .iter()
        .enumerate()
        .filter_map(|(i, s)| if let Step::Label(l) = s { Some((*l, i)) } else { None })
        .collect();
    let mut seen = vec![false; steps.len() + 1];
    let mut todo = vec![0usize];
    while let Some(i) = todo.pop() {
        if std::mem::replace(&mut seen[i], true) {
            continue;
        }
        match steps.get(i) {
            None => return Some("the end of the body"),
            Some(Step::Unwaited(l)) => return Some(l),
            Some(Step::Wait) => {}
            Some(Step::Label(_)) => todo.push(i + 1),
            Some(Step::Branch { to, conditional }) => {
                // a target that is not a label of this body cannot be followed: count it as leaving
                let Some(&t) = labels.get(to) else { return Some("a branch out of the body") };
                todo.push(t);
                if *conditional {
                    todo.push(i + 1);
                }
            }
        }
    }
    None
}

/// The kernels whose weight loads break kernels/common.cuh's rule: one of
/// `streaming` (those that read each weight once a decode step) without
/// the L2 evict-first policy (`stream_policy`), or a prefill group kernel
/// with it (its blocks read the same rows for other tokens).
fn weight_policy_misplaced<'a>(ptx: &'a str, streaming: &[&str]) -> Vec<&'a str> {
    entries(ptx)
        .filter(|(k, body)| {
            let hinted = body.contains("createpolicy.fractional.L2::evict_first") && body.contains(".L2::cache_hint");
            (streaming.contains(k) && !hinted) || (k.ends_with("_groups") && hinted)
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
    assert_eq!(weight_policy_misplaced(&ptx, &["linear_t1_r4_fp8", "expert_down"]), ["expert_down", "linear_groups"]);
}

#[test]
fn the_entry_check_sees_a_kernel_without_the_wait() {
    let ptx =
        ".version 8.8\n.entry a(\n griddepcontrol.wait;\n griddepcontrol.launch_dependents;\n}\n.entry b(\n ret;\n}\n";
    let missing: Vec<&str> =
        entries(ptx).filter(|(_, body)| !body.contains("griddepcontrol.wait")).map(|(k, _)| k).collect();
    assert_eq!(missing, ["b"]);
}

#[test]
fn the_wait_check_follows_branches_to_an_early_return_or_write() {
    // waits first, then branches and stores: fine
    let waits = ".entry a(\n{\n griddepcontrol.wait;\n @%p1 bra $L__BB0_2;\n st.global.f32 [%rd1], %f1;\n$L__BB0_2:\n ret;\n}\n";
    // a block past the end of the work leaves before the wait
    let early = ".entry b(\n{\n @%p1 bra $L__BB1_2;\n griddepcontrol.wait;\n$L__BB1_2:\n ret;\n}\n";
    // the wait on one side of a branch only
    let one_side = ".entry c(\n{\n @!%p1 bra $L__BB2_1;\n griddepcontrol.wait;\n bra.uni $L__BB2_2;\n$L__BB2_1:\n \
                    add.s32 %r1, %r1, 1;\n$L__BB2_2:\n ret;\n}\n";
    // a loop before the wait, then the wait on every path
    let looped =
        ".entry d(\n{\n$L__BB3_1:\n add.s32 %r1, %r1, 1;\n @%p1 bra $L__BB3_1;\n griddepcontrol.wait;\n ret;\n}\n";
    // a wait that some threads skip
    let predicated = ".entry e(\n{\n @%p1 griddepcontrol.wait;\n ret;\n}\n";
    // weights staged into shared memory before the wait: fine
    let shared =
        ".entry f(\n{\n ld.global.nc.f32 %f1, [%rd1];\n st.shared.f32 [%r1], %f1;\n griddepcontrol.wait;\n ret;\n}\n";
    // an output zeroed on one branch before the wait, and a counter bumped before it
    let zeroed = ".entry g(\n{\n @%p1 bra $L__BB6_2;\n @%p2 st.global.f32 [%rd1], 0f00000000;\n$L__BB6_2:\n \
                  griddepcontrol.wait;\n ret;\n}\n";
    let counted = ".entry h(\n{\n atom.global.add.u32 %r1, [%rd1], 1;\n griddepcontrol.wait;\n ret;\n}\n";
    let ptx = format!("{waits}{early}{one_side}{looped}{predicated}{shared}{zeroed}{counted}");
    assert_eq!(
        unwaited_kernels(&ptx),
        [
            ("b", "ret;"),
            ("c", "ret;"),
            ("e", "ret;"),
            ("g", "@%p2 st.global.f32 [%rd1], 0f00000000;"),
            ("h", "atom.global.add.u32 %r1, [%rd1], 1;")
        ]
    );
}
