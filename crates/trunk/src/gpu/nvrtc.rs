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
    ("moe_tensor.cu", include_str!("../../../../kernels/moe_tensor.cu")),
    ("linear_tensor.cu", include_str!("../../../../kernels/linear_tensor.cu")),
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
    "linear_mma_short",
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
    "rms_norm_rope_warps",
    "rms_norm_f32_key_rope",
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
    "attention_rows_pair_normed",
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
    "expert_gate_up_bf16",
    "expert_down_bf16",
    "expert_gate_up_bf16_groups",
    "expert_down_bf16_groups",
    "limb_rows",
    "limb_tables_fill",
    "linear_bf16_one",
    "linear_bf16_groups",
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

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    /// The text up to the bracket that closes one opened just before
    /// `text`, and the rest after that bracket.
    fn balanced(text: &str) -> Option<(&str, &str)> {
        let mut depth = 0usize;
        for (i, c) in text.char_indices() {
            match c {
                '(' | '[' | '{' => depth += 1,
                ')' | ']' | '}' if depth == 0 => return Some((&text[..i], &text[i + 1..])),
                ')' | ']' | '}' => depth -= 1,
                _ => {}
            }
        }
        None
    }

    /// `text` cut at its commas outside brackets (an empty last piece, a
    /// trailing comma's, left out).
    fn top_level(text: &str) -> Vec<&str> {
        let (mut out, mut depth, mut start) = (Vec::new(), 0i32, 0);
        for (i, c) in text.char_indices() {
            match c {
                '(' | '[' | '{' => depth += 1,
                ')' | ']' | '}' => depth -= 1,
                ',' if depth == 0 => {
                    out.push(text[start..i].trim());
                    start = i + 1;
                }
                _ => {}
            }
        }
        let last = text[start..].trim();
        if !last.is_empty() {
            out.push(last);
        }
        out
    }

    /// Every `extern "C" __global__` kernel of `src` and its parameters'
    /// count, object-like `#define`s among the parameters counted as their
    /// bodies' parameters, and kernels that a function-like define declares
    /// (`extern "C" __global__ void NAME(...)`, NAME its first argument)
    /// counted where it is invoked.
    fn kernel_params(src: &str) -> HashMap<String, usize> {
        let joined = src.replace("\\\n", " ");
        // object-like defines' bodies; function-like defines that declare a kernel, with that kernel's text
        let (mut defines, mut makers) = (HashMap::new(), Vec::new());
        for rest in joined.lines().filter_map(|line| line.trim_start().strip_prefix("#define ")) {
            let name: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            let body = &rest[name.len()..];
            if !body.starts_with('(') {
                defines.insert(name, body.trim().to_string());
            } else if let Some((_, kernel)) = body.split_once("extern \"C\" __global__ void NAME") {
                makers.push((name, kernel.to_string()));
            }
        }
        fn count(params: &str, defines: &HashMap<String, String>) -> usize {
            top_level(params)
                .into_iter()
                .map(|p| match defines.get(p) {
                    Some(body) => count(body, defines),
                    None => usize::from(p != "void"),
                })
                .sum()
        }
        let declared = joined.split("extern \"C\" __global__ void").skip(1).map(|p| p.to_string());
        let made = joined.lines().flat_map(|line| {
            makers.iter().filter_map(move |(maker, kernel)| {
                let args = line.strip_prefix(&format!("{maker}("))?;
                Some(format!("{}{kernel}", args.split(',').next()?.trim()))
            })
        });
        let mut kernels = HashMap::new();
        for part in declared.chain(made) {
            let mut rest = part.trim_start();
            while let Some(attr) = ["__launch_bounds__(", "__cluster_dims__("].iter().find(|a| rest.starts_with(**a)) {
                rest = balanced(&rest[attr.len()..]).expect("an attribute's arguments").1.trim_start();
            }
            let open = rest.find('(').expect("a kernel's parameters");
            let params = balanced(&rest[open + 1..]).expect("a kernel's parameters").0;
            kernels.insert(rest[..open].trim().to_string(), count(params, &defines));
        }
        kernels
    }

    /// Every `launch!` (a line's first word) of `rs` with a literal kernel
    /// name: (name, the arguments' count).
    fn launches(rs: &str) -> Vec<(String, usize)> {
        let (mut out, mut offset) = (Vec::new(), 0);
        for line in rs.split_inclusive('\n') {
            let at = offset;
            offset += line.len();
            let word = line.trim_start();
            let word = word.strip_prefix("crate::").unwrap_or(word);
            let Some(part) = word.strip_prefix("launch!(") else { continue };
            let start = at + line.len() - part.len();
            let body = balanced(&rs[start..]).expect("a launch's arguments").0;
            let (head, args) = body.split_once(';').expect("a launch's `;`");
            let head = top_level(head);
            if let Some(name) = head.get(1).and_then(|h| h.strip_prefix('"')).and_then(|h| h.strip_suffix('"')) {
                out.push((name.to_string(), top_level(args).len()));
            }
        }
        out
    }

    #[test]
    fn launches_pass_what_their_kernels_take() {
        let src = super::source();
        let kernels = kernel_params(&src);
        let missing: Vec<_> = super::KERNELS.iter().filter(|k| !kernels.contains_key(**k)).collect();
        assert!(missing.is_empty(), "listed kernels without a signature: {missing:?}");
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/gpu");
        let mut checked = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let rs = std::fs::read_to_string(&path).unwrap();
            for (name, n) in launches(&rs) {
                let want = kernels.get(&name).unwrap_or_else(|| panic!("{}: no kernel {name}", path.display()));
                assert_eq!(n, *want, "{}: {name} launched with {n} arguments, takes {want}", path.display());
                checked += 1;
            }
        }
        assert!(checked >= 30, "only {checked} launches found");
        // the check sees a launch one argument short, and a kernel's parameters through a define
        let fake =
            "#define PS int a, \\\n float* b\nextern \"C\" __global__ void __launch_bounds__(256, 2) k(PS, int n) {}\n\
                    #define MK(NAME, F) extern \"C\" __global__ void NAME(int a) { f<F>(a); }\nMK(k2, 3)\n";
        assert_eq!(kernel_params(fake).get("k"), Some(&3));
        assert_eq!(kernel_params(fake).get("k2"), Some(&1));
        let short = "launch!(g, \"k\", Gpu::cfg((n as u32, 1, 1), 256, 0); a, f(b, c));";
        assert_eq!(launches(short), vec![("k".to_string(), 2)]);
    }
}
