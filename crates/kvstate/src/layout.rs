//! A state layout: the list of named cache classes a decoder keeps between steps.
//!
//! A class is a table of rows of one width and one element type. How many rows
//! it has follows from a capacity rule and the state's capacity in positions:
//! a `Grows` class gets one row per `positions_per_row` positions (a KV cache,
//! a list of compressed entries), a `Ring` class has a fixed number of rows that
//! is reused cyclically (a sliding window), a `Fixed` class a fixed number of
//! rows written from the start (a small per-sequence register file).

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Element type of a class. The state does not interpret elements; the type
/// fixes the element size and is part of the layout identity.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ElemType {
    F32,
    BF16,
    F16,
    U8,
    I32,
}

impl ElemType {
    pub fn size(self) -> usize {
        match self {
            ElemType::F32 | ElemType::I32 => 4,
            ElemType::BF16 | ElemType::F16 => 2,
            ElemType::U8 => 1,
        }
    }
}

/// How many rows a class has for a state of a given capacity (in positions).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum CapacityRule {
    /// One row per `positions_per_row` positions, rounded up.
    Grows { positions_per_row: usize },
    /// A ring of `rows` rows; row `i` of the stream lives in slot `i % rows`.
    Ring { rows: usize },
    /// `rows` rows, independent of capacity.
    Fixed { rows: usize },
}

impl CapacityRule {
    pub fn rows_for(self, capacity_positions: usize) -> usize {
        match self {
            CapacityRule::Grows { positions_per_row } => capacity_positions.div_ceil(positions_per_row),
            CapacityRule::Ring { rows } | CapacityRule::Fixed { rows } => rows,
        }
    }
}

/// One named cache class.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClassSpec {
    pub name: String,
    /// Elements per row.
    pub row_width: usize,
    pub elem: ElemType,
    pub rule: CapacityRule,
}

impl ClassSpec {
    pub fn new(name: impl Into<String>, row_width: usize, elem: ElemType, rule: CapacityRule) -> Self {
        ClassSpec { name: name.into(), row_width, elem, rule }
    }

    pub fn row_bytes(&self) -> usize {
        self.row_width * self.elem.size()
    }
}

/// The classes of a state, in a fixed order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Layout {
    pub classes: Vec<ClassSpec>,
}

impl Layout {
    pub fn new(classes: Vec<ClassSpec>) -> Result<Self, crate::StateError> {
        let mut seen = std::collections::HashSet::new();
        for c in &classes {
            if !seen.insert(c.name.as_str()) {
                return Err(crate::StateError::Layout(format!("class name `{}` appears twice", c.name)));
            }
            if c.row_width == 0 {
                return Err(crate::StateError::Layout(format!("class `{}` has row width 0", c.name)));
            }
            match c.rule {
                CapacityRule::Grows { positions_per_row: 0 } => {
                    return Err(crate::StateError::Layout(format!("class `{}`: positions_per_row is 0", c.name)))
                }
                CapacityRule::Ring { rows: 0 } => {
                    return Err(crate::StateError::Layout(format!("class `{}`: ring of 0 rows", c.name)))
                }
                _ => {}
            }
        }
        Ok(Layout { classes })
    }

    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.classes.iter().position(|c| c.name == name)
    }

    /// Bytes of all classes at a capacity (what an allocation costs).
    pub fn bytes_for(&self, capacity_positions: usize) -> usize {
        self.classes.iter().map(|c| c.rule.rows_for(capacity_positions) * c.row_bytes()).sum()
    }

    /// A stable identity of the layout: sha256 over its canonical JSON.
    pub fn fingerprint(&self) -> String {
        let json = serde_json::to_vec(self).expect("layout serializes");
        hex(&Sha256::digest(&json))
    }
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
