//! Snapshots: the live rows of every class, copied out of a state, and put
//! back into a state of equal or larger capacity.

use std::sync::Arc;

use crate::layout::Layout;
use crate::state::StateStore;
use crate::StateError;

/// Host memory a snapshot keeps its rows in. Plain vectors on the host path;
/// a device backend may hand page-locked buffers (see `HostBytes`).
pub trait HostBytes: AsRef<[u8]> + AsMut<[u8]> {}
impl HostBytes for Vec<u8> {}

/// The live rows of one class, oldest first.
#[derive(Clone, Debug)]
pub struct ClassSnapshot<B = Vec<u8>> {
    pub written: u64,
    pub live_rows: usize,
    pub bytes: B,
}

/// A lossless copy of a state's live contents. Dead capacity is not saved.
#[derive(Clone, Debug)]
pub struct Snapshot<B = Vec<u8>> {
    pub layout: Arc<Layout>,
    pub positions: usize,
    pub classes: Vec<ClassSnapshot<B>>,
}

impl<B: HostBytes> Snapshot<B> {
    /// Bytes of row data held.
    pub fn bytes(&self) -> usize {
        self.classes.iter().map(|c| c.bytes.as_ref().len()).sum()
    }

    /// Names of the classes whose counters or bytes differ from `other`'s.
    /// A different layout differs everywhere.
    pub fn differing_classes<C: HostBytes>(&self, other: &Snapshot<C>) -> Vec<String> {
        if self.layout != other.layout {
            return self.layout.classes.iter().map(|c| c.name.clone()).collect();
        }
        let mut out = Vec::new();
        for (i, (a, b)) in self.classes.iter().zip(&other.classes).enumerate() {
            if a.written != b.written || a.bytes.as_ref() != b.bytes.as_ref() {
                out.push(self.layout.classes[i].name.clone());
            }
        }
        if self.positions != other.positions {
            out.push("<positions>".to_string());
        }
        out
    }
}

/// Copy the live rows of every class of `state` into a new snapshot,
/// allocating each class's buffer with `alloc(bytes)`.
pub fn snapshot_with<S: StateStore + ?Sized, B: HostBytes>(
    state: &S,
    mut alloc: impl FnMut(usize) -> B,
) -> Result<Snapshot<B>, StateError> {
    let layout = state.layout().clone();
    let mut classes = Vec::with_capacity(layout.classes.len());
    for (i, spec) in layout.classes.iter().enumerate() {
        let live = state.live_rows(i);
        let mut bytes = alloc(live * spec.row_bytes());
        state.read_live(i, bytes.as_mut())?;
        classes.push(ClassSnapshot { written: state.written(i), live_rows: live, bytes });
    }
    Ok(Snapshot { layout, positions: state.positions(), classes })
}

/// `snapshot_with` into plain vectors.
pub fn snapshot<S: StateStore + ?Sized>(state: &S) -> Result<Snapshot, StateError> {
    snapshot_with(state, |n| vec![0u8; n])
}

/// Check that `snap` fits `state` (same layout, enough capacity) without
/// touching it.
pub fn check_restorable<S: StateStore + ?Sized, B: HostBytes>(snap: &Snapshot<B>, state: &S) -> Result<(), StateError> {
    if **state.layout() != *snap.layout {
        return Err(StateError::LayoutMismatch {
            expected: state.layout().fingerprint(),
            got: snap.layout.fingerprint(),
        });
    }
    if snap.classes.len() != snap.layout.classes.len() {
        return Err(StateError::Format(format!(
            "snapshot holds {} classes, its layout {}",
            snap.classes.len(),
            snap.layout.classes.len()
        )));
    }
    if snap.positions > state.capacity() {
        return Err(StateError::Capacity { needed: snap.positions, capacity: state.capacity() });
    }
    for (i, c) in snap.classes.iter().enumerate() {
        let spec = &snap.layout.classes[i];
        let rows = state.rows(i);
        let is_ring = matches!(spec.rule, crate::CapacityRule::Ring { .. });
        if !is_ring && c.written as usize > rows {
            return Err(StateError::Full { class: spec.name.clone(), rows });
        }
        let live = crate::state::live_rows(spec, rows, c.written);
        if live != c.live_rows {
            return Err(StateError::Size { class: spec.name.clone(), expected: live, got: c.live_rows });
        }
        if c.bytes.as_ref().len() != c.live_rows * spec.row_bytes() {
            return Err(StateError::Size {
                class: spec.name.clone(),
                expected: c.live_rows * spec.row_bytes(),
                got: c.bytes.as_ref().len(),
            });
        }
    }
    Ok(())
}

/// Put a snapshot back into `state` (equal or larger capacity). On error the
/// state is untouched: every check runs before the first write.
pub fn restore<S: StateStore + ?Sized, B: HostBytes>(snap: &Snapshot<B>, state: &mut S) -> Result<(), StateError> {
    check_restorable(snap, state)?;
    for (i, c) in snap.classes.iter().enumerate() {
        state.write_live(i, c.written, c.bytes.as_ref())?;
    }
    state.set_positions(snap.positions);
    Ok(())
}
