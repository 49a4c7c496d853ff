//! Kernel sources (`kernels/*.cu`, one op per file) compiled by NVRTC at load
//! time: to machine code (a cubin) for the device's own architecture, once
//! per architecture and process, which the driver loads as it is; and to
//! PTX for `compute_90`, the form the tests read.
//!
//! The machine code is kept on disk between processes (`kernel_cache_dir`),
//! under a key of everything that shapes it, so only a build's first start
//! on a machine compiles. On the GPU machine (run 180, perf-log.md's
//! fifty-seventh session) that first start took 62-74 s, about what
//! loading PTX took (64-77 s, NVRTC's PTX and the driver's compile of it),
//! and a later one 0.6 s (the small model's whole load) where loading PTX
//! took 4-8 s in every process.

use std::collections::HashMap;
use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use sha2::{Digest, Sha256};

use anyhow::{anyhow, bail, Result};

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

const NO_NVRTC: &str = "NVRTC (libnvrtc.so) was not found: kernels cannot be compiled on this machine";

/// NVRTC's options for every compile, beside the target architecture.
const OPTIONS: &[&str] = &["--std=c++17"];

/// Compile the kernels to PTX for `compute_90` (cached for the process).
pub fn ptx() -> Result<&'static str> {
    static PTX: OnceLock<Result<String, String>> = OnceLock::new();
    PTX.get_or_init(|| {
        if !library_present("nvrtc") {
            return Err(NO_NVRTC.into());
        }
        let opts = cudarc::nvrtc::CompileOptions {
            arch: Some("compute_90"),
            options: OPTIONS.iter().map(|o| o.to_string()).collect(),
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

/// The oldest compute capability the kernels run on (thread block
/// clusters, `griddepcontrol`, the FP64 `mma.sync` shapes: Hopper).
pub const MIN_COMPUTE_CAPABILITY: (i32, i32) = (9, 0);

/// A refusal of compute capabilities below [`MIN_COMPUTE_CAPABILITY`].
fn supported(major: i32, minor: i32) -> Result<()> {
    if (major, minor) < MIN_COMPUTE_CAPABILITY {
        let (a, b) = MIN_COMPUTE_CAPABILITY;
        bail!("compute capability {major}.{minor}: the kernels need {a}.{b} or later");
    }
    Ok(())
}

/// Compile the kernels to machine code for compute capability
/// `major.minor` (`sm_<major><minor>`), cached for the process by
/// capability.
pub fn cubin(major: i32, minor: i32) -> Result<Arc<Vec<u8>>> {
    type Cache = Mutex<HashMap<(i32, i32), Result<Arc<Vec<u8>>, String>>>;
    static CUBINS: OnceLock<Cache> = OnceLock::new();
    supported(major, minor)?;
    let mut cache =
        CUBINS.get_or_init(Default::default).lock().map_err(|_| anyhow!("the cubin cache's lock was poisoned"))?;
    cache
        .entry((major, minor))
        .or_insert_with(|| {
            let (src, key) = cubin_source_and_key(major, minor)?;
            kept(kernel_cache_dir().as_deref(), &key, || compile_cubin(&arch_name(major, minor), src)).map(Arc::new)
        })
        .clone()
        .map_err(|e| anyhow!("{e}"))
}

/// The file that holds (or will hold) the machine code for compute
/// capability `major.minor` between processes: None where there is no
/// cache directory (`kernel_cache_dir`).
pub fn kept_cubin_path(major: i32, minor: i32) -> Result<Option<PathBuf>> {
    supported(major, minor)?;
    let (_, key) = cubin_source_and_key(major, minor).map_err(|e| anyhow!("{e}"))?;
    Ok(kernel_cache_dir().map(|d| d.join(key)))
}

/// NVRTC's name of compute capability `major.minor`.
fn arch_name(major: i32, minor: i32) -> String {
    format!("sm_{major}{minor}")
}

/// The kernels' source and the name its machine code for `major.minor`
/// is kept under (`cubin_key`), where NVRTC is present.
fn cubin_source_and_key(major: i32, minor: i32) -> Result<(String, String), String> {
    if !library_present("nvrtc") {
        return Err(NO_NVRTC.into());
    }
    let src = source();
    let key = cubin_key(&arch_name(major, minor), &src)?;
    Ok((src, key))
}

/// The name of the machine code for `arch` on disk: a hash of the kernels'
/// source `src`, NVRTC's options, NVRTC's version and the architecture.
fn cubin_key(arch: &str, src: &str) -> Result<String, String> {
    let (mut major, mut minor) = (0, 0);
    // SAFETY: two out-parameters that live across the call.
    unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut major, &mut minor) }
        .result()
        .map_err(|e| format!("NVRTC's version: {e}"))?;
    let mut h = Sha256::new();
    for part in [src, &OPTIONS.join(" "), &format!("nvrtc {major}.{minor}"), arch] {
        h.update((part.len() as u64).to_le_bytes());
        h.update(part.as_bytes());
    }
    Ok(format!("{arch}-{:x}", h.finalize()))
}

/// Where compiled kernels are kept between processes:
/// `$XDG_CACHE_HOME/memra/kernels`, else `$HOME/.cache/memra/kernels`.
pub fn kernel_cache_dir() -> Option<PathBuf> {
    let base = match std::env::var_os("XDG_CACHE_HOME") {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => PathBuf::from(std::env::var_os("HOME").filter(|h| !h.is_empty())?).join(".cache"),
    };
    Some(base.join("memra").join("kernels"))
}

/// How many images the disk store keeps (the newest; a few MB each).
const KEPT_IMAGES: usize = 16;

/// The image kept in `dir` under `key` when it is whole (the file holds the
/// image's SHA-256 and then the image), else `compile()`'s, kept there for
/// the next process, beside at most `KEPT_IMAGES - 1` older ones. Failing
/// to read or write the directory costs only a compile; a file written at
/// once by two processes is renamed into place whole.
fn kept(dir: Option<&Path>, key: &str, compile: impl FnOnce() -> Result<Vec<u8>, String>) -> Result<Vec<u8>, String> {
    let path = dir.map(|d| d.join(key));
    if let Some(mut bytes) = path.as_ref().and_then(|p| std::fs::read(p).ok()) {
        if bytes.len() > 32 && bytes[..32] == Sha256::digest(&bytes[32..])[..] {
            bytes.drain(..32); // the header, in place: no second buffer for the image
            return Ok(bytes);
        }
    }
    let image = compile()?;
    if let (Some(dir), Some(path)) = (dir, path) {
        let tmp = dir.join(format!("{key}.{}.tmp", std::process::id()));
        let written = std::fs::create_dir_all(dir)
            .and_then(|()| std::fs::write(&tmp, [&Sha256::digest(&image)[..], &image].concat()))
            .and_then(|()| std::fs::rename(&tmp, &path));
        if written.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        prune(dir, key);
    }
    Ok(image)
}

/// Remove all but the newest `KEPT_IMAGES` files of `dir` (never `key`'s).
fn prune(dir: &Path, key: &str) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    let mut files: Vec<(std::time::SystemTime, PathBuf)> = entries
        .flatten()
        .filter(|e| e.file_name() != key)
        .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
        .collect();
    files.sort_by(|a, b| b.cmp(a));
    for (_, path) in files.iter().skip(KEPT_IMAGES - 1) {
        let _ = std::fs::remove_file(path);
    }
}

fn compile_cubin(arch: &str, src: String) -> Result<Vec<u8>, String> {
    use cudarc::nvrtc::{result, sys};
    let failed = |what: &str, e: &dyn std::fmt::Display| format!("NVRTC failed to {what} kernels/ for {arch}: {e}");
    let src = CString::new(src).map_err(|e| failed("read", &e))?;
    let prog = result::create_program(&src, None).map_err(|e| failed("create a program of", &e))?;
    let mut options: Vec<String> = OPTIONS.iter().map(|o| o.to_string()).collect();
    options.push(format!("-arch={arch}"));
    // SAFETY: `prog` is a live program until `destroy_program` below; the
    // buffer handed to nvrtcGetCUBIN holds the size NVRTC reported.
    unsafe {
        let compiled = result::compile_program(prog, &options).map_err(|e| {
            let log = result::get_program_log(prog)
                .map(|l| std::ffi::CStr::from_ptr(l.as_ptr()).to_string_lossy().into_owned())
                .unwrap_or_default();
            failed("compile", &format!("{e}\n{log}"))
        });
        let image = compiled.and_then(|()| {
            let mut size = 0usize;
            sys::nvrtcGetCUBINSize(prog, &mut size).result().map_err(|e| failed("size the cubin of", &e))?;
            let mut image = vec![0u8; size];
            sys::nvrtcGetCUBIN(prog, image.as_mut_ptr().cast())
                .result()
                .map_err(|e| failed("copy the cubin of", &e))?;
            Ok(image)
        });
        result::destroy_program(prog).map_err(|e| failed("release the program of", &e))?;
        image
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::{kept, KEPT_IMAGES};

    #[test]
    fn kept_images_are_read_back_whole_or_compiled_again() {
        let dir = std::env::temp_dir().join(format!("memra-kept-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let image = b"\x7fELF image".to_vec();
        let compiles = std::cell::Cell::new(0);
        let compile = || {
            compiles.set(compiles.get() + 1);
            Ok(image.clone())
        };
        // compiled once, then read back without compiling
        assert_eq!(kept(Some(&dir), "k", compile).unwrap(), image);
        assert_eq!(kept(Some(&dir), "k", compile).unwrap(), image);
        assert_eq!(compiles.get(), 1);
        // another key is another image
        assert_eq!(kept(Some(&dir), "other", compile).unwrap(), image);
        assert_eq!(compiles.get(), 2);
        // a damaged or truncated file is compiled again, and replaced
        let path = dir.join("k");
        let mut bytes = std::fs::read(&path).unwrap();
        *bytes.last_mut().unwrap() ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        assert_eq!(kept(Some(&dir), "k", compile).unwrap(), image);
        assert_eq!(compiles.get(), 3);
        std::fs::write(&path, &bytes[..20]).unwrap();
        assert_eq!(kept(Some(&dir), "k", compile).unwrap(), image);
        assert_eq!(kept(Some(&dir), "k", compile).unwrap(), image);
        assert_eq!(compiles.get(), 4);
        // a directory that cannot be made (a file is in the way), or none, costs a compile, not an error
        let blocked = dir.join("k").join("below");
        assert_eq!(kept(Some(&blocked), "k", compile).unwrap(), image);
        assert_eq!(kept(None, "k", compile).unwrap(), image);
        assert_eq!(compiles.get(), 6);
        // a failed compile is the error, and nothing is kept
        assert_eq!(kept(Some(&dir), "bad", || Err("no".into())), Err::<Vec<u8>, _>("no".into()));
        assert!(!dir.join("bad").exists());
        // the store keeps the newest KEPT_IMAGES, the one just written among them
        for i in 0..KEPT_IMAGES + 3 {
            assert_eq!(kept(Some(&dir), &format!("n{i}"), compile).unwrap(), image);
        }
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), KEPT_IMAGES);
        assert!(dir.join(format!("n{}", KEPT_IMAGES + 2)).exists());
        // no temporary files left behind
        assert!(std::fs::read_dir(&dir).unwrap().all(|e| !e.unwrap().file_name().to_string_lossy().ends_with(".tmp")));
        std::fs::remove_dir_all(&dir).unwrap();
    }

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
