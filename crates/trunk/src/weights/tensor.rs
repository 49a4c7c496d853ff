//! Raw tensors as files hold them: a dtype, a shape and a byte view that is
//! either memory-mapped or owned.

use std::ops::Deref;
use std::sync::Arc;

use anyhow::{anyhow, bail, Result};

/// Element types found in DSV4 checkpoints (safetensors and GGUF).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    F32,
    F16,
    BF16,
    F64,
    /// FP8 E4M3 (`float8_e4m3fn`)
    F8E4M3,
    /// Unsigned power-of-two scale (`float8_e8m0fnu`)
    F8E8M0,
    /// Signed bytes; packed FP4 E2M1 pairs in the official expert tensors
    I8,
    U8,
    I32,
    I64,
    /// ggml MXFP4 blocks: 17 bytes per 32 values (GGUF only)
    Mxfp4,
    /// ggml Q8_0 blocks: 34 bytes per 32 values (GGUF only)
    Q8_0,
}

impl DType {
    /// Bytes per element; `None` for block formats.
    pub fn size(self) -> Option<usize> {
        Some(match self {
            DType::F64 | DType::I64 => 8,
            DType::F32 | DType::I32 => 4,
            DType::F16 | DType::BF16 => 2,
            DType::F8E4M3 | DType::F8E8M0 | DType::I8 | DType::U8 => 1,
            DType::Mxfp4 | DType::Q8_0 => return None,
        })
    }

    /// Bytes of a tensor of `shape` (innermost dimension last); an error,
    /// not a wrapped count, where a file's shape is too large to address.
    pub fn bytes_for(self, shape: &[usize]) -> Result<usize> {
        let too_large = || anyhow!("shape {shape:?} is too large to address");
        let n = shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d)).ok_or_else(too_large)?;
        Ok(match self {
            DType::Mxfp4 | DType::Q8_0 => {
                let inner = *shape.last().unwrap_or(&1);
                if !inner.is_multiple_of(32) {
                    bail!("{self:?} needs an innermost dimension divisible by 32, got {inner}");
                }
                n / 32 * if self == DType::Mxfp4 { 17 } else { 34 }
            }
            other => n.checked_mul(other.size().unwrap()).ok_or_else(too_large)?,
        })
    }

    pub fn safetensors_name(self) -> Option<&'static str> {
        Some(match self {
            DType::F32 => "F32",
            DType::F16 => "F16",
            DType::BF16 => "BF16",
            DType::F64 => "F64",
            DType::F8E4M3 => "F8_E4M3",
            DType::F8E8M0 => "F8_E8M0",
            DType::I8 => "I8",
            DType::U8 => "U8",
            DType::I32 => "I32",
            DType::I64 => "I64",
            DType::Mxfp4 | DType::Q8_0 => return None,
        })
    }

    pub fn from_safetensors_name(s: &str) -> Option<Self> {
        Some(match s {
            "F32" => DType::F32,
            "F16" => DType::F16,
            "BF16" => DType::BF16,
            "F64" => DType::F64,
            "F8_E4M3" => DType::F8E4M3,
            "F8_E8M0" => DType::F8E8M0,
            "I8" => DType::I8,
            "U8" => DType::U8,
            "I32" => DType::I32,
            "I64" => DType::I64,
            _ => return None,
        })
    }
}

/// A cheap-to-clone view of bytes that live in a memory map or a vector.
#[derive(Clone)]
pub struct Bytes {
    owner: Arc<dyn AsRef<[u8]> + Send + Sync>,
    start: usize,
    len: usize,
}

impl Bytes {
    pub fn from_vec(v: Vec<u8>) -> Self {
        let len = v.len();
        Bytes { owner: Arc::new(v), start: 0, len }
    }

    pub fn from_owner(owner: Arc<dyn AsRef<[u8]> + Send + Sync>, start: usize, len: usize) -> Self {
        assert!(start + len <= (*owner).as_ref().len());
        Bytes { owner, start, len }
    }

    /// A sub-view `[start, start+len)` of this view.
    pub fn slice(&self, start: usize, len: usize) -> Self {
        assert!(start + len <= self.len, "slice {start}+{len} beyond {}", self.len);
        Bytes { owner: self.owner.clone(), start: self.start + start, len }
    }
}

impl Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &(*self.owner).as_ref()[self.start..self.start + self.len]
    }
}

impl std::fmt::Debug for Bytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Bytes({} bytes)", self.len)
    }
}

/// One tensor as stored.
#[derive(Clone, Debug)]
pub struct RawTensor {
    pub dtype: DType,
    /// Outermost first (PyTorch order).
    pub shape: Vec<usize>,
    pub data: Bytes,
}

impl RawTensor {
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// Decode a float tensor of any plain float dtype to f32.
    pub fn to_f32(&self) -> Result<Vec<f32>> {
        use super::formats::*;
        let d = &self.data[..];
        Ok(match self.dtype {
            DType::F32 => d.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect(),
            DType::BF16 => d.chunks_exact(2).map(|c| bf16_to_f32(u16::from_le_bytes([c[0], c[1]]))).collect(),
            DType::F16 => d.chunks_exact(2).map(|c| f16_to_f32(u16::from_le_bytes([c[0], c[1]]))).collect(),
            DType::F64 => d.chunks_exact(8).map(|c| f64::from_le_bytes(c.try_into().unwrap()) as f32).collect(),
            other => bail!("dtype {other:?} is not a plain float type"),
        })
    }

    /// Decode an integer tensor to i64.
    pub fn to_i64(&self) -> Result<Vec<i64>> {
        let d = &self.data[..];
        Ok(match self.dtype {
            DType::I64 => d.chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().unwrap())).collect(),
            DType::I32 => d.chunks_exact(4).map(|c| i32::from_le_bytes(c.try_into().unwrap()) as i64).collect(),
            DType::I8 => d.iter().map(|&b| b as i8 as i64).collect(),
            DType::U8 => d.iter().map(|&b| b as i64).collect(),
            other => bail!("dtype {other:?} is not an integer type"),
        })
    }
}

/// Something that can hand out tensors by name (a safetensors directory, a
/// GGUF file, an in-memory synthetic model).
pub trait TensorSource: Send + Sync {
    fn get(&self, name: &str) -> Option<RawTensor>;
    fn names(&self) -> Vec<String>;
    /// Where the tensor lives, for error messages (a file path).
    fn origin(&self, name: &str) -> String;
}
