//! Kernel sources (`kernels/*.cu`, one op per file) compiled by NVRTC at load
//! time for `compute_90`, once per process.

use std::sync::OnceLock;

use anyhow::{anyhow, Result};

/// The kernel files, in translation-unit order (the shared header first).
pub const SOURCES: &[(&str, &str)] = &[
    ("common.cuh", include_str!("../../../../kernels/common.cuh")),
    ("rows.cuh", include_str!("../../../../kernels/rows.cuh")),
    ("linear.cu", include_str!("../../../../kernels/linear.cu")),
    ("norm.cu", include_str!("../../../../kernels/norm.cu")),
    ("embed.cu", include_str!("../../../../kernels/embed.cu")),
    ("hc.cu", include_str!("../../../../kernels/hc.cu")),
    ("rope.cu", include_str!("../../../../kernels/rope.cu")),
    ("quant.cu", include_str!("../../../../kernels/quant.cu")),
    ("attention.cu", include_str!("../../../../kernels/attention.cu")),
    ("compressor.cu", include_str!("../../../../kernels/compressor.cu")),
    ("indexer.cu", include_str!("../../../../kernels/indexer.cu")),
    ("moe.cu", include_str!("../../../../kernels/moe.cu")),
    ("argmax.cu", include_str!("../../../../kernels/argmax.cu")),
];

/// Every kernel entry point the engine launches.
pub const KERNELS: &[&str] = &[
    "linear_f32",
    "linear_f32_t1",
    "linear_grouped",
    "linear_grouped_t1",
    "linear_groups",
    "linear_mma",
    "linear_mma_bf16",
    "linear_t1_r1_f32",
    "linear_t1_r1_bf16",
    "linear_t1_r1_fp8",
    "linear_t1_r1_fp4",
    "linear_t1_r2_f32",
    "linear_t1_r2_bf16",
    "linear_t1_r2_fp8",
    "linear_t1_r2_fp4",
    "linear_t1_r4_f32",
    "linear_t1_r4_bf16",
    "linear_t1_r4_fp8",
    "linear_t1_r4_fp4",
    "rms_norm_f32",
    "rms_norm_rope",
    "embed_rows",
    "hc_site",
    "hc_site_rows",
    "hc_collapse_rows",
    "hc_sinkhorn",
    "hc_post",
    "rope_rows",
    "act_fp8_rows",
    "kv_fp8_rows",
    "indexer_rows",
    "attention_rows",
    "attention_rows_pair",
    "attention_rows_h2",
    "attention_mma",
    "ring_append",
    "compress_pool",
    "compress_ring_append",
    "indexer_scores",
    "indexer_scores_mma",
    "indexer_topk",
    "moe_route",
    "moe_group_pairs",
    "expert_gate_up",
    "expert_down",
    "expert_gate_up_groups",
    "expert_down_groups",
    "expert_gate_up_mma",
    "expert_down_mma",
    "swiglu_rows",
    "argmax_slices",
    "argmax_rows",
];

/// The whole translation unit.
pub fn source() -> String {
    let mut s = String::new();
    for (name, text) in SOURCES {
        s += &format!("// ---- {name} ----\n{text}\n");
    }
    s
}

/// Whether a shared library can be opened, under any of cudarc's names.
pub fn library_present(name: &str) -> bool {
    cudarc::get_lib_name_candidates(name).iter().any(|c| unsafe { libloading::Library::new(c) }.is_ok())
}

/// Compile the kernels to PTX (cached for the process).
pub fn ptx() -> Result<&'static str> {
    static PTX: OnceLock<Result<String, String>> = OnceLock::new();
    PTX.get_or_init(|| {
        if !library_present("nvrtc") {
            return Err("NVRTC (libnvrtc.so) was not found: kernels cannot be compiled on this machine".into());
        }
        let opts = cudarc::nvrtc::CompileOptions {
            arch: Some("compute_90"),
            options: vec!["--std=c++17".into()],
            ..Default::default()
        };
        cudarc::nvrtc::compile_ptx_with_opts(source(), opts)
            .map(|p| p.to_src())
            .map_err(|e| format!("NVRTC failed to compile kernels/: {e}"))
    })
    .as_ref()
    .map(|s| s.as_str())
    .map_err(|e| anyhow!("{e}"))
}
