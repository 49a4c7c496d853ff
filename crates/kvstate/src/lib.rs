//! kvstate: decode state as named cache classes.
//!
//! A decoder describes its state as a [`Layout`]: named classes of rows with
//! a width, an element type and a capacity rule. This crate allocates such
//! states, keeps live-row bookkeeping, takes lossless snapshots of the live
//! rows, restores them into an equal or larger capacity, and parks them to
//! disk in a checked file format. It knows nothing about any model.

pub mod device;
mod joint;
mod layout;
pub mod park;
mod snapshot;
mod state;

pub use device::{DeviceState, PinnedBytes};
pub use joint::Joint;
pub use layout::{CapacityRule, ClassSpec, ElemType, Layout};
pub use park::{park, read_snapshot, unpark, write_snapshot, Identity};
pub use snapshot::{check_restorable, restore, snapshot, snapshot_with, ClassSnapshot, HostBytes, Snapshot};
pub use state::{slot_of, AlignedBuf, HostClass, HostState, StateStore};

/// Errors of state handling. Every variant names the class or field at fault.
#[derive(Debug)]
pub enum StateError {
    Layout(String),
    NoClass(String),
    Full { class: String, rows: usize },
    Size { class: String, expected: usize, got: usize },
    Capacity { needed: usize, capacity: usize },
    LayoutMismatch { expected: String, got: String },
    Io(std::io::Error),
    Format(String),
}

impl std::fmt::Display for StateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StateError::Layout(m) => write!(f, "invalid layout: {m}"),
            StateError::NoClass(n) => write!(f, "no cache class named `{n}`"),
            StateError::Full { class, rows } => write!(f, "cache class `{class}` is full ({rows} rows)"),
            StateError::Size { class, expected, got } => {
                write!(f, "cache class `{class}`: expected {expected}, got {got}")
            }
            StateError::Capacity { needed, capacity } => {
                write!(f, "state holds {needed} positions but the target capacity is {capacity}")
            }
            StateError::LayoutMismatch { expected, got } => {
                write!(f, "layout mismatch: target layout {expected}, snapshot layout {got}")
            }
            StateError::Io(e) => write!(f, "i/o error: {e}"),
            StateError::Format(m) => write!(f, "{m}"),
        }
    }
}

impl std::error::Error for StateError {}

impl From<std::io::Error> for StateError {
    fn from(e: std::io::Error) -> Self {
        StateError::Io(e)
    }
}
