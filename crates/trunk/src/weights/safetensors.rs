//! Hugging Face safetensors: memory-mapped reading of single or sharded
//! checkpoints (with `model.safetensors.index.json`), and writing.
//!
//! File layout: an 8-byte little-endian header length `N`, `N` bytes of JSON
//! (`{"name": {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__"?}`),
//! then the data section; offsets are relative to the data section.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use serde_json::{Map, Value};

use super::tensor::{Bytes, DType, RawTensor, TensorSource};

struct Entry {
    file: usize,
    dtype: DType,
    shape: Vec<usize>,
    begin: usize,
    end: usize,
}

/// All tensors of a checkpoint directory (or a single file), memory-mapped.
pub struct SafetensorsDir {
    files: Vec<(PathBuf, Arc<memmap2::Mmap>, usize)>,
    entries: HashMap<String, Entry>,
}

impl SafetensorsDir {
    /// Open `path`: a directory (index json, `model.safetensors`, or every
    /// `*.safetensors` in it) or one `.safetensors` file.
    pub fn open(path: &Path) -> Result<Self> {
        let files: Vec<PathBuf> = if path.is_file() {
            vec![path.to_path_buf()]
        } else if path.join("model.safetensors.index.json").exists() {
            let index_path = path.join("model.safetensors.index.json");
            let text =
                std::fs::read_to_string(&index_path).with_context(|| format!("reading {}", index_path.display()))?;
            let v: Value =
                serde_json::from_str(&text).with_context(|| format!("{}: not valid JSON", index_path.display()))?;
            let map = v
                .get("weight_map")
                .and_then(|m| m.as_object())
                .with_context(|| format!("{}: no `weight_map` object", index_path.display()))?;
            let mut names: Vec<String> = map.values().filter_map(|f| f.as_str().map(String::from)).collect();
            names.sort();
            names.dedup();
            names.into_iter().map(|f| path.join(f)).collect()
        } else {
            let mut v: Vec<PathBuf> = std::fs::read_dir(path)
                .with_context(|| format!("reading directory {}", path.display()))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "safetensors"))
                .collect();
            v.sort();
            if v.is_empty() {
                bail!("{}: no .safetensors files", path.display());
            }
            v
        };
        let mut out = SafetensorsDir { files: Vec::new(), entries: HashMap::new() };
        for f in files {
            out.add_file(&f)?;
        }
        Ok(out)
    }

    fn add_file(&mut self, path: &Path) -> Result<()> {
        let file = File::open(path).with_context(|| format!("opening {}", path.display()))?;
        // SAFETY: the map is read-only; a file changed underneath us would give
        // wrong weights, not memory unsafety in our code (we never trust offsets
        // without checking them against the mapped length).
        let map = unsafe { memmap2::Mmap::map(&file) }.with_context(|| format!("mapping {}", path.display()))?;
        let total = map.len();
        if total < 8 {
            bail!("{}: truncated safetensors file ({total} bytes, no header length)", path.display());
        }
        let hlen = u64::from_le_bytes(map[..8].try_into().unwrap()) as usize;
        if hlen > total - 8 {
            bail!("{}: truncated safetensors file: header claims {hlen} bytes, file has {}", path.display(), total - 8);
        }
        let header: Value = serde_json::from_slice(&map[8..8 + hlen])
            .with_context(|| format!("{}: safetensors header is not valid JSON", path.display()))?;
        let header = header.as_object().with_context(|| format!("{}: header is not an object", path.display()))?;
        let data_start = 8 + hlen;
        let data_len = total - data_start;
        let file_idx = self.files.len();
        for (name, info) in header {
            if name == "__metadata__" {
                continue;
            }
            let ctx = || format!("{}: tensor `{name}`", path.display());
            let dtype_s = info.get("dtype").and_then(|d| d.as_str()).with_context(|| format!("{}: no dtype", ctx()))?;
            let dtype = DType::from_safetensors_name(dtype_s)
                .with_context(|| format!("{}: unknown dtype `{dtype_s}`", ctx()))?;
            let shape: Vec<usize> = info
                .get("shape")
                .and_then(|s| s.as_array())
                .with_context(|| format!("{}: no shape", ctx()))?
                .iter()
                .map(|d| d.as_u64().map(|x| x as usize))
                .collect::<Option<_>>()
                .with_context(|| format!("{}: shape is not a list of integers", ctx()))?;
            let offs = info
                .get("data_offsets")
                .and_then(|s| s.as_array())
                .filter(|a| a.len() == 2)
                .with_context(|| format!("{}: no data_offsets pair", ctx()))?;
            let begin = offs[0].as_u64().with_context(|| format!("{}: bad offset", ctx()))? as usize;
            let end = offs[1].as_u64().with_context(|| format!("{}: bad offset", ctx()))? as usize;
            let want = dtype.bytes_for(&shape).with_context(ctx)?;
            if end < begin || end - begin != want {
                bail!(
                    "{}: data_offsets [{begin}, {end}) hold {} bytes but dtype {dtype_s} shape {shape:?} needs {want}",
                    ctx(),
                    end.saturating_sub(begin)
                );
            }
            if end > data_len {
                bail!("{}: truncated file: tensor ends at byte {end} of the data section, which has {data_len}", ctx());
            }
            if self.entries.contains_key(name) {
                bail!("{}: tensor also present in another shard", ctx());
            }
            self.entries.insert(name.clone(), Entry { file: file_idx, dtype, shape, begin, end });
        }
        self.files.push((path.to_path_buf(), Arc::new(map), data_start));
        Ok(())
    }

    pub fn files(&self) -> Vec<PathBuf> {
        self.files.iter().map(|f| f.0.clone()).collect()
    }
}

impl TensorSource for SafetensorsDir {
    fn get(&self, name: &str) -> Option<RawTensor> {
        let e = self.entries.get(name)?;
        let (_, map, data_start) = &self.files[e.file];
        let owner: Arc<dyn AsRef<[u8]> + Send + Sync> = Arc::new(ArcMap(map.clone()));
        Some(RawTensor {
            dtype: e.dtype,
            shape: e.shape.clone(),
            data: Bytes::from_owner(owner, data_start + e.begin, e.end - e.begin),
        })
    }

    fn names(&self) -> Vec<String> {
        let mut v: Vec<String> = self.entries.keys().cloned().collect();
        v.sort();
        v
    }

    fn origin(&self, name: &str) -> String {
        match self.entries.get(name) {
            Some(e) => self.files[e.file].0.display().to_string(),
            None => self.files.first().map(|f| f.0.display().to_string()).unwrap_or_default(),
        }
    }
}

struct ArcMap(Arc<memmap2::Mmap>);
impl AsRef<[u8]> for ArcMap {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

/// What a writer needs to know about a tensor before its bytes exist.
#[derive(Clone, Debug)]
pub struct TensorPlan {
    pub name: String,
    pub dtype: DType,
    pub shape: Vec<usize>,
}

impl TensorPlan {
    pub fn bytes(&self) -> usize {
        self.dtype.bytes_for(&self.shape).expect("planned tensor has a valid shape")
    }
}

/// Write `plans` into `dir` as one file or as shards of at most
/// `shard_bytes` (with an index json), pulling each tensor's bytes from
/// `produce` in order. Returns the files written.
pub fn write_checkpoint(
    dir: &Path,
    plans: &[TensorPlan],
    shard_bytes: usize,
    metadata: &BTreeMap<String, String>,
    mut produce: impl FnMut(&TensorPlan) -> Result<Vec<u8>>,
    mut progress: impl FnMut(usize),
) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    // split into shards in plan order
    let mut shards: Vec<Vec<&TensorPlan>> = vec![Vec::new()];
    let mut cur = 0usize;
    for p in plans {
        let b = p.bytes();
        if cur > 0 && cur + b > shard_bytes {
            shards.push(Vec::new());
            cur = 0;
        }
        shards.last_mut().unwrap().push(p);
        cur += b;
    }
    let n = shards.len();
    let mut written = Vec::new();
    let mut weight_map = Map::new();
    let mut total = 0usize;
    for (i, shard) in shards.iter().enumerate() {
        let fname = if n == 1 {
            "model.safetensors".to_string()
        } else {
            format!("model-{:05}-of-{:05}.safetensors", i + 1, n)
        };
        let path = dir.join(&fname);
        let mut header = Map::new();
        if !metadata.is_empty() {
            header.insert(
                "__metadata__".into(),
                Value::Object(metadata.iter().map(|(k, v)| (k.clone(), Value::from(v.clone()))).collect()),
            );
        }
        let mut off = 0usize;
        for p in shard {
            let b = p.bytes();
            header.insert(
                p.name.clone(),
                serde_json::json!({
                    "dtype": p.dtype.safetensors_name().context("dtype has no safetensors name")?,
                    "shape": p.shape,
                    "data_offsets": [off, off + b],
                }),
            );
            off += b;
            weight_map.insert(p.name.clone(), Value::from(fname.clone()));
            total += b;
        }
        let mut hbytes = serde_json::to_vec(&Value::Object(header))?;
        while hbytes.len() % 8 != 0 {
            hbytes.push(b' ');
        }
        let tmp = dir.join(format!(".{fname}.tmp"));
        let f = File::create(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
        let mut w = BufWriter::with_capacity(1 << 22, f);
        w.write_all(&(hbytes.len() as u64).to_le_bytes())?;
        w.write_all(&hbytes)?;
        for p in shard {
            let bytes = produce(p)?;
            if bytes.len() != p.bytes() {
                bail!("tensor `{}`: produced {} bytes, planned {}", p.name, bytes.len(), p.bytes());
            }
            w.write_all(&bytes)?;
            progress(bytes.len());
        }
        w.flush()?;
        drop(w);
        std::fs::rename(&tmp, &path)?;
        written.push(path);
    }
    if n > 1 {
        let index = serde_json::json!({"metadata": {"total_size": total}, "weight_map": weight_map});
        let p = dir.join("model.safetensors.index.json");
        std::fs::write(&p, serde_json::to_vec_pretty(&index)?)?;
        written.push(p);
    }
    Ok(written)
}
