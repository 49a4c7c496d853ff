//! GGUF v3: reading (memory-mapped) and writing.
//!
//! Layout: magic `GGUF`, version u32 = 3, tensor count u64, metadata count
//! u64; metadata pairs (string key, u32 value type, value); tensor infos
//! (string name, u32 n_dims, n_dims x u64 extents innermost first, u32 ggml
//! type, u64 offset into the data section); padding to `general.alignment`
//! (default 32); the data section, each tensor padded to the alignment.
//! Shapes here are exposed outermost-first like safetensors (the reverse of
//! GGUF's extents); the bytes are the same C-order bytes.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context, Result};

use super::tensor::{Bytes, DType, RawTensor, TensorSource};

/// A metadata value.
#[derive(Clone, Debug, PartialEq)]
pub enum GgufValue {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    Str(String),
    Array(Vec<GgufValue>),
    U64(u64),
    I64(i64),
    F64(f64),
}

impl GgufValue {
    pub fn as_u64(&self) -> Option<u64> {
        Some(match *self {
            GgufValue::U8(v) => v as u64,
            GgufValue::U16(v) => v as u64,
            GgufValue::U32(v) => v as u64,
            GgufValue::U64(v) => v,
            GgufValue::I8(v) if v >= 0 => v as u64,
            GgufValue::I16(v) if v >= 0 => v as u64,
            GgufValue::I32(v) if v >= 0 => v as u64,
            GgufValue::I64(v) if v >= 0 => v as u64,
            _ => return None,
        })
    }
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            GgufValue::F32(v) => Some(v as f64),
            GgufValue::F64(v) => Some(v),
            _ => self.as_u64().map(|v| v as f64),
        }
    }
    pub fn as_str(&self) -> Option<&str> {
        match self {
            GgufValue::Str(s) => Some(s),
            _ => None,
        }
    }
    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            GgufValue::Bool(b) => Some(b),
            _ => None,
        }
    }
    pub fn as_array(&self) -> Option<&[GgufValue]> {
        match self {
            GgufValue::Array(a) => Some(a),
            _ => None,
        }
    }
    fn type_id(&self) -> u32 {
        match self {
            GgufValue::U8(_) => 0,
            GgufValue::I8(_) => 1,
            GgufValue::U16(_) => 2,
            GgufValue::I16(_) => 3,
            GgufValue::U32(_) => 4,
            GgufValue::I32(_) => 5,
            GgufValue::F32(_) => 6,
            GgufValue::Bool(_) => 7,
            GgufValue::Str(_) => 8,
            GgufValue::Array(_) => 9,
            GgufValue::U64(_) => 10,
            GgufValue::I64(_) => 11,
            GgufValue::F64(_) => 12,
        }
    }
}

fn ggml_type_to_dtype(t: u32) -> Option<DType> {
    Some(match t {
        0 => DType::F32,
        1 => DType::F16,
        8 => DType::Q8_0,
        24 => DType::I8,
        26 => DType::I32,
        27 => DType::I64,
        28 => DType::F64,
        30 => DType::BF16,
        39 => DType::Mxfp4,
        _ => return None,
    })
}

fn dtype_to_ggml_type(d: DType) -> Result<u32> {
    Ok(match d {
        DType::F32 => 0,
        DType::F16 => 1,
        DType::Q8_0 => 8,
        DType::I8 => 24,
        DType::I32 => 26,
        DType::I64 => 27,
        DType::F64 => 28,
        DType::BF16 => 30,
        DType::Mxfp4 => 39,
        other => bail!("dtype {other:?} has no GGUF type"),
    })
}

struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
    path: &'a Path,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8]> {
        if self.pos + n > self.buf.len() {
            bail!(
                "{}: truncated GGUF file while reading {what} at byte {} (file has {} bytes)",
                self.path.display(),
                self.pos,
                self.buf.len()
            );
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }
    fn u32(&mut self, what: &str) -> Result<u32> {
        Ok(u32::from_le_bytes(self.take(4, what)?.try_into().unwrap()))
    }
    fn u64(&mut self, what: &str) -> Result<u64> {
        Ok(u64::from_le_bytes(self.take(8, what)?.try_into().unwrap()))
    }
    fn string(&mut self, what: &str) -> Result<String> {
        let n = self.u64(what)? as usize;
        if n > self.buf.len() {
            bail!("{}: {what}: string length {n} exceeds the file", self.path.display());
        }
        let b = self.take(n, what)?;
        String::from_utf8(b.to_vec()).with_context(|| format!("{}: {what} is not UTF-8", self.path.display()))
    }
    fn value(&mut self, ty: u32, key: &str, depth: usize) -> Result<GgufValue> {
        let w = format!("metadata `{key}`");
        Ok(match ty {
            0 => GgufValue::U8(self.take(1, &w)?[0]),
            1 => GgufValue::I8(self.take(1, &w)?[0] as i8),
            2 => GgufValue::U16(u16::from_le_bytes(self.take(2, &w)?.try_into().unwrap())),
            3 => GgufValue::I16(i16::from_le_bytes(self.take(2, &w)?.try_into().unwrap())),
            4 => GgufValue::U32(self.u32(&w)?),
            5 => GgufValue::I32(self.u32(&w)? as i32),
            6 => GgufValue::F32(f32::from_bits(self.u32(&w)?)),
            7 => GgufValue::Bool(self.take(1, &w)?[0] != 0),
            8 => GgufValue::Str(self.string(&w)?),
            9 => {
                if depth > 0 {
                    bail!("{}: {w}: nested arrays are not allowed", self.path.display());
                }
                let et = self.u32(&w)?;
                let n = self.u64(&w)? as usize;
                // each element takes a byte at least; a damaged count
                // reserves no more than a tokenizer's list would
                if n > self.buf.len() - self.pos {
                    bail!("{}: {w}: array length {n} exceeds the rest of the file", self.path.display());
                }
                let mut v = Vec::with_capacity(n.min(1 << 18));
                for _ in 0..n {
                    v.push(self.value(et, key, depth + 1)?);
                }
                GgufValue::Array(v)
            }
            10 => GgufValue::U64(self.u64(&w)?),
            11 => GgufValue::I64(self.u64(&w)? as i64),
            12 => GgufValue::F64(f64::from_bits(self.u64(&w)?)),
            t => bail!("{}: {w} has unknown value type {t}", self.path.display()),
        })
    }
}

struct Info {
    dtype: DType,
    shape: Vec<usize>,
    offset: usize,
    bytes: usize,
}

/// A GGUF file, memory-mapped.
pub struct GgufFile {
    path: PathBuf,
    map: Arc<memmap2::Mmap>,
    pub metadata: BTreeMap<String, GgufValue>,
    tensors: BTreeMap<String, Info>,
    data_start: usize,
}

struct ArcMap(Arc<memmap2::Mmap>);
impl AsRef<[u8]> for ArcMap {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl GgufFile {
    pub fn open(path: &Path) -> Result<Self> {
        let file = File::open(path).with_context(|| format!("opening {}", path.display()))?;
        // SAFETY: read-only map; every offset is checked against its length.
        let map = unsafe { memmap2::Mmap::map(&file) }.with_context(|| format!("mapping {}", path.display()))?;
        let mut c = Cursor { buf: &map, pos: 0, path };
        let magic = c.take(4, "magic")?;
        if magic != b"GGUF" {
            bail!("{}: not a GGUF file (magic {:?})", path.display(), magic);
        }
        let version = c.u32("version")?;
        if version != 3 {
            bail!("{}: GGUF version {version} is not supported (expected 3)", path.display());
        }
        let n_tensors = c.u64("tensor count")? as usize;
        let n_kv = c.u64("metadata count")? as usize;
        let mut metadata = BTreeMap::new();
        for _ in 0..n_kv {
            let key = c.string("metadata key")?;
            let ty = c.u32("metadata type")?;
            let v = c.value(ty, &key, 0)?;
            if metadata.insert(key.clone(), v).is_some() {
                bail!("{}: metadata key `{key}` appears twice", path.display());
            }
        }
        let align = match metadata.get("general.alignment") {
            Some(GgufValue::U32(a)) if a.is_power_of_two() => *a as usize,
            Some(other) => bail!("{}: `general.alignment` must be a u32 power of two, got {other:?}", path.display()),
            None => 32,
        };
        let mut infos = Vec::with_capacity(n_tensors.min(1 << 20));
        for _ in 0..n_tensors {
            let name = c.string("tensor name")?;
            let nd = c.u32("tensor dims")? as usize;
            if nd > 4 {
                bail!("{}: tensor `{name}` has {nd} dimensions (at most 4)", path.display());
            }
            let mut ne = Vec::with_capacity(nd);
            for _ in 0..nd {
                ne.push(c.u64("tensor extent")? as usize);
            }
            let ty = c.u32("tensor type")?;
            let dtype = ggml_type_to_dtype(ty)
                .with_context(|| format!("{}: tensor `{name}` has unsupported ggml type {ty}", path.display()))?;
            let offset = c.u64("tensor offset")? as usize;
            let shape: Vec<usize> = ne.iter().rev().copied().collect();
            let bytes = dtype.bytes_for(&shape).with_context(|| format!("{}: tensor `{name}`", path.display()))?;
            infos.push((name, Info { dtype, shape, offset, bytes }));
        }
        let data_start = c.pos.div_ceil(align) * align;
        let data_len = map.len().saturating_sub(data_start);
        let mut tensors = BTreeMap::new();
        for (name, info) in infos {
            if info.offset % align != 0 {
                bail!("{}: tensor `{name}` offset {} is not aligned to {align}", path.display(), info.offset);
            }
            if info.offset.checked_add(info.bytes).is_none_or(|end| end > data_len) {
                bail!(
                    "{}: truncated GGUF file: tensor `{name}` needs {} bytes at offset {} of a data section of {data_len}",
                    path.display(),
                    info.bytes,
                    info.offset
                );
            }
            if tensors.insert(name.clone(), info).is_some() {
                bail!("{}: tensor `{name}` appears twice", path.display());
            }
        }
        Ok(GgufFile { path: path.to_path_buf(), map: Arc::new(map), metadata, tensors, data_start })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl TensorSource for GgufFile {
    fn get(&self, name: &str) -> Option<RawTensor> {
        let i = self.tensors.get(name)?;
        let owner: Arc<dyn AsRef<[u8]> + Send + Sync> = Arc::new(ArcMap(self.map.clone()));
        Some(RawTensor {
            dtype: i.dtype,
            shape: i.shape.clone(),
            data: Bytes::from_owner(owner, self.data_start + i.offset, i.bytes),
        })
    }
    fn names(&self) -> Vec<String> {
        self.tensors.keys().cloned().collect()
    }
    fn origin(&self, _name: &str) -> String {
        self.path.display().to_string()
    }
}

fn write_string(w: &mut impl Write, s: &str) -> Result<()> {
    w.write_all(&(s.len() as u64).to_le_bytes())?;
    w.write_all(s.as_bytes())?;
    Ok(())
}

fn write_value(w: &mut impl Write, v: &GgufValue) -> Result<()> {
    match v {
        GgufValue::U8(x) => w.write_all(&[*x])?,
        GgufValue::I8(x) => w.write_all(&[*x as u8])?,
        GgufValue::U16(x) => w.write_all(&x.to_le_bytes())?,
        GgufValue::I16(x) => w.write_all(&x.to_le_bytes())?,
        GgufValue::U32(x) => w.write_all(&x.to_le_bytes())?,
        GgufValue::I32(x) => w.write_all(&x.to_le_bytes())?,
        GgufValue::F32(x) => w.write_all(&x.to_le_bytes())?,
        GgufValue::Bool(x) => w.write_all(&[*x as u8])?,
        GgufValue::Str(s) => write_string(w, s)?,
        GgufValue::Array(a) => {
            let et = a.first().map(|x| x.type_id()).unwrap_or(4);
            if a.iter().any(|x| x.type_id() != et || et == 9) {
                bail!("GGUF arrays must hold one non-array type");
            }
            w.write_all(&et.to_le_bytes())?;
            w.write_all(&(a.len() as u64).to_le_bytes())?;
            for x in a {
                write_value(w, x)?;
            }
        }
        GgufValue::U64(x) => w.write_all(&x.to_le_bytes())?,
        GgufValue::I64(x) => w.write_all(&x.to_le_bytes())?,
        GgufValue::F64(x) => w.write_all(&x.to_le_bytes())?,
    }
    Ok(())
}

/// Write a GGUF file: `metadata` in order, then tensors in `plans` order with
/// bytes from `produce`. Written to a temporary name and renamed.
pub fn write_gguf(
    path: &Path,
    metadata: &[(String, GgufValue)],
    plans: &[super::safetensors::TensorPlan],
    mut produce: impl FnMut(&super::safetensors::TensorPlan) -> Result<Vec<u8>>,
    mut progress: impl FnMut(usize),
) -> Result<()> {
    const ALIGN: usize = 32;
    let tmp = path.with_extension("gguf.tmp");
    let f = File::create(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
    let mut w = BufWriter::with_capacity(1 << 22, f);
    let mut pos = 0usize;
    let mut head = Vec::new();
    head.extend_from_slice(b"GGUF");
    head.extend_from_slice(&3u32.to_le_bytes());
    head.extend_from_slice(&(plans.len() as u64).to_le_bytes());
    head.extend_from_slice(&(metadata.len() as u64).to_le_bytes());
    for (k, v) in metadata {
        write_string(&mut head, k)?;
        head.extend_from_slice(&v.type_id().to_le_bytes());
        write_value(&mut head, v)?;
    }
    let mut offset = 0usize;
    for p in plans {
        if p.name.len() >= 64 {
            bail!("GGUF tensor name `{}` is longer than 63 bytes", p.name);
        }
        write_string(&mut head, &p.name)?;
        head.extend_from_slice(&(p.shape.len() as u32).to_le_bytes());
        for d in p.shape.iter().rev() {
            head.extend_from_slice(&(*d as u64).to_le_bytes());
        }
        head.extend_from_slice(&dtype_to_ggml_type(p.dtype)?.to_le_bytes());
        head.extend_from_slice(&(offset as u64).to_le_bytes());
        offset += p.bytes().div_ceil(ALIGN) * ALIGN;
    }
    w.write_all(&head)?;
    pos += head.len();
    let pad = pos.div_ceil(ALIGN) * ALIGN - pos;
    w.write_all(&vec![0u8; pad])?;
    for p in plans {
        let b = produce(p)?;
        if b.len() != p.bytes() {
            bail!("tensor `{}`: produced {} bytes, planned {}", p.name, b.len(), p.bytes());
        }
        w.write_all(&b)?;
        let pad = b.len().div_ceil(ALIGN) * ALIGN - b.len();
        w.write_all(&vec![0u8; pad])?;
        progress(b.len());
    }
    w.flush()?;
    drop(w);
    std::fs::rename(&tmp, path).with_context(|| format!("renaming to {}", path.display()))?;
    Ok(())
}
