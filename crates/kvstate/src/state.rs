//! Live-row bookkeeping and the host storage backend.
//!
//! Every class keeps a stream counter `written`: how many rows were ever
//! appended. For `Grows` and `Fixed` classes the live rows are rows
//! `0..written`; for a `Ring` of `R` rows they are the last `min(written, R)`
//! stream rows, stream row `i` living in slot `i % R`. Because the slot of a
//! row depends only on its stream index, a ring restored with the same
//! counter holds every live row in the same slot ("keeps its head"), and a
//! growing class restored into a larger capacity keeps each row at its index.

use std::sync::Arc;

use crate::layout::{CapacityRule, ClassSpec, ElemType, Layout};
use crate::StateError;

/// What a backend (host or device) exposes so that snapshots, restores and
/// comparisons are written once.
pub trait StateStore {
    fn layout(&self) -> &Arc<Layout>;
    /// Capacity in positions the state was allocated for.
    fn capacity(&self) -> usize;
    /// Positions consumed so far (a decoder's sequence length).
    fn positions(&self) -> usize;
    fn set_positions(&mut self, positions: usize);
    /// Stream counter of class `i`.
    fn written(&self, class: usize) -> u64;
    /// Copy the live rows of class `i`, oldest first, into `out`
    /// (`live_rows(i) * row_bytes` bytes).
    fn read_live(&self, class: usize, out: &mut [u8]) -> Result<(), StateError>;
    /// Set the stream counter of class `i` and write its live rows, oldest
    /// first, from `rows`.
    fn write_live(&mut self, class: usize, written: u64, rows: &[u8]) -> Result<(), StateError>;

    /// Forget the newest rows of class `i`, down to stream counter `written`
    /// (a rollback). Rows still physically present become live again, so the
    /// caller must not rewind a ring past its slack.
    fn truncate(&mut self, class: usize, written: u64) -> Result<(), StateError>;

    /// Rows allocated for class `i` at this state's capacity.
    fn rows(&self, class: usize) -> usize {
        self.layout().classes[class].rule.rows_for(self.capacity())
    }

    /// Live rows of class `i`.
    fn live_rows(&self, class: usize) -> usize {
        live_rows(&self.layout().classes[class], self.rows(class), self.written(class))
    }

    /// Bytes of the live rows of all classes.
    fn live_bytes(&self) -> usize {
        (0..self.layout().classes.len()).map(|i| self.live_rows(i) * self.layout().classes[i].row_bytes()).sum()
    }
}

pub(crate) fn live_rows(spec: &ClassSpec, rows: usize, written: u64) -> usize {
    match spec.rule {
        CapacityRule::Ring { .. } => (written.min(rows as u64)) as usize,
        CapacityRule::Grows { .. } | CapacityRule::Fixed { .. } => written as usize,
    }
}

/// Move a stream counter back (never forward).
pub(crate) fn rewind_counter(name: &str, counter: &mut u64, written: u64) -> Result<(), StateError> {
    if written > *counter {
        return Err(StateError::Format(format!(
            "class `{name}`: cannot rewind forward from {} to {written} rows",
            *counter
        )));
    }
    *counter = written;
    Ok(())
}

/// The physical slot of stream row `index` in a class of `rows` rows.
pub fn slot_of(spec: &ClassSpec, rows: usize, index: u64) -> usize {
    match spec.rule {
        CapacityRule::Ring { .. } => (index % rows as u64) as usize,
        _ => index as usize,
    }
}

/// A byte buffer aligned to 8 bytes, so that f32/i32/u16 views are sound.
#[derive(Clone)]
pub struct AlignedBuf {
    words: Vec<u64>,
    len: usize,
}

impl AlignedBuf {
    pub fn zeroed(len: usize) -> Self {
        AlignedBuf { words: vec![0u64; len.div_ceil(8)], len }
    }
    pub fn as_bytes(&self) -> &[u8] {
        // SAFETY: u64 storage covers `len` bytes; u8 has alignment 1.
        unsafe { std::slice::from_raw_parts(self.words.as_ptr() as *const u8, self.len) }
    }
    pub fn as_bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above, and we hold the unique borrow.
        unsafe { std::slice::from_raw_parts_mut(self.words.as_mut_ptr() as *mut u8, self.len) }
    }
    pub fn as_f32(&self) -> &[f32] {
        // SAFETY: 8-byte aligned storage, any bit pattern is a valid f32.
        unsafe { std::slice::from_raw_parts(self.words.as_ptr() as *const f32, self.len / 4) }
    }
    pub fn as_f32_mut(&mut self) -> &mut [f32] {
        // SAFETY: as above, unique borrow.
        unsafe { std::slice::from_raw_parts_mut(self.words.as_mut_ptr() as *mut f32, self.len / 4) }
    }
}

/// One class on the host.
#[derive(Clone)]
pub struct HostClass {
    pub written: u64,
    pub rows: usize,
    pub data: AlignedBuf,
}

/// A decode state in host memory.
#[derive(Clone)]
pub struct HostState {
    layout: Arc<Layout>,
    capacity: usize,
    positions: usize,
    classes: Vec<HostClass>,
}

impl HostState {
    /// Allocate a state for `capacity` positions.
    pub fn new(layout: Arc<Layout>, capacity: usize) -> Self {
        let classes = layout
            .classes
            .iter()
            .map(|c| {
                let rows = c.rule.rows_for(capacity);
                HostClass { written: 0, rows, data: AlignedBuf::zeroed(rows * c.row_bytes()) }
            })
            .collect();
        HostState { layout, capacity, positions: 0, classes }
    }

    pub fn class_index(&self, name: &str) -> Result<usize, StateError> {
        self.layout.index_of(name).ok_or_else(|| StateError::NoClass(name.to_string()))
    }

    pub fn spec(&self, class: usize) -> &ClassSpec {
        &self.layout.classes[class]
    }

    /// Stream row `index` of an f32 class (must be live).
    pub fn row_f32(&self, class: usize, index: u64) -> &[f32] {
        let spec = &self.layout.classes[class];
        debug_assert_eq!(spec.elem, ElemType::F32);
        let c = &self.classes[class];
        debug_assert!(index < c.written && c.written - index <= live_rows(spec, c.rows, c.written) as u64);
        let slot = slot_of(spec, c.rows, index);
        &c.data.as_f32()[slot * spec.row_width..(slot + 1) * spec.row_width]
    }

    /// Append one row to an f32 class; refuses to overrun a growing class.
    pub fn push_row_f32(&mut self, class: usize, row: &[f32]) -> Result<(), StateError> {
        let spec = &self.layout.classes[class];
        assert_eq!(spec.elem, ElemType::F32, "class `{}` is not f32", spec.name);
        assert_eq!(row.len(), spec.row_width, "row width of class `{}`", spec.name);
        let c = &mut self.classes[class];
        if !matches!(spec.rule, CapacityRule::Ring { .. }) && c.written as usize >= c.rows {
            return Err(StateError::Full { class: spec.name.clone(), rows: c.rows });
        }
        let slot = slot_of(spec, c.rows, c.written);
        c.data.as_f32_mut()[slot * spec.row_width..(slot + 1) * spec.row_width].copy_from_slice(row);
        c.written += 1;
        Ok(())
    }

    pub fn class(&self, class: usize) -> &HostClass {
        &self.classes[class]
    }

    /// Raw access to a class's storage, for backends that fill it in bulk.
    pub fn class_mut(&mut self, class: usize) -> &mut HostClass {
        &mut self.classes[class]
    }
}

impl StateStore for HostState {
    fn layout(&self) -> &Arc<Layout> {
        &self.layout
    }
    fn capacity(&self) -> usize {
        self.capacity
    }
    fn positions(&self) -> usize {
        self.positions
    }
    fn set_positions(&mut self, positions: usize) {
        self.positions = positions;
    }
    fn written(&self, class: usize) -> u64 {
        self.classes[class].written
    }

    fn truncate(&mut self, class: usize, written: u64) -> Result<(), StateError> {
        rewind_counter(&self.layout.classes[class].name, &mut self.classes[class].written, written)
    }

    fn read_live(&self, class: usize, out: &mut [u8]) -> Result<(), StateError> {
        let spec = &self.layout.classes[class];
        let c = &self.classes[class];
        let live = live_rows(spec, c.rows, c.written);
        let rb = spec.row_bytes();
        if out.len() != live * rb {
            return Err(StateError::Size { class: spec.name.clone(), expected: live * rb, got: out.len() });
        }
        let bytes = c.data.as_bytes();
        for k in 0..live {
            let slot = slot_of(spec, c.rows, c.written - live as u64 + k as u64);
            out[k * rb..(k + 1) * rb].copy_from_slice(&bytes[slot * rb..(slot + 1) * rb]);
        }
        Ok(())
    }

    fn write_live(&mut self, class: usize, written: u64, rows: &[u8]) -> Result<(), StateError> {
        let spec = &self.layout.classes[class];
        let c = &mut self.classes[class];
        let live = live_rows(spec, c.rows, written);
        if !matches!(spec.rule, CapacityRule::Ring { .. }) && written as usize > c.rows {
            return Err(StateError::Full { class: spec.name.clone(), rows: c.rows });
        }
        let rb = spec.row_bytes();
        if rows.len() != live * rb {
            return Err(StateError::Size { class: spec.name.clone(), expected: live * rb, got: rows.len() });
        }
        let bytes = c.data.as_bytes_mut();
        for k in 0..live {
            let slot = slot_of(spec, c.rows, written - live as u64 + k as u64);
            bytes[slot * rb..(slot + 1) * rb].copy_from_slice(&rows[k * rb..(k + 1) * rb]);
        }
        c.written = written;
        Ok(())
    }
}
