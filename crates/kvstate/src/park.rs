//! Parking a state to disk: a versioned, checksummed file, written atomically.
//!
//! Format (version 1, little-endian):
//!
//! | bytes | content |
//! |---|---|
//! | 8 | magic `MEMRAKV1` |
//! | 4 | format version (1) |
//! | 8 | header length `H` |
//! | H | header, JSON: `identity` (caller's model identity, e.g. config and weights sha256), `layout`, `layout_fingerprint`, `positions`, `classes` (`name`, `written`, `live_rows`, `bytes`, `sha256` each) |
//! | 32 | sha256 of everything above |
//! | ... | the classes' live rows, oldest first, in layout order, exactly the sum of `bytes` |
//!
//! A file is written to a temporary name in the same directory, synced and
//! renamed. Loading checks magic, version, header checksum, identity, layout,
//! that the header's classes are the layout's with the counters and sizes a
//! snapshot at `positions` holds, total length and every class checksum
//! before anything is restored; a failed load leaves the target state
//! untouched.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::Path;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::layout::{hex, CapacityRule, Layout};
use crate::snapshot::{restore, snapshot, ClassSnapshot, HostBytes, Snapshot};
use crate::state::{live_rows, StateStore};
use crate::StateError;

pub const MAGIC: &[u8; 8] = b"MEMRAKV1";
pub const VERSION: u32 = 1;

/// Who a state belongs to: model-defined keys (the engine writes its config
/// fingerprint and weights sha256). A file parks only into an equal identity.
pub type Identity = BTreeMap<String, String>;

#[derive(Serialize, Deserialize)]
struct ClassHeader {
    name: String,
    written: u64,
    live_rows: usize,
    bytes: usize,
    sha256: String,
}

#[derive(Serialize, Deserialize)]
struct Header {
    identity: Identity,
    layout: Layout,
    layout_fingerprint: String,
    positions: usize,
    classes: Vec<ClassHeader>,
}

fn fmt_err(path: &Path, m: impl std::fmt::Display) -> StateError {
    StateError::Format(format!("{}: {m}", path.display()))
}

/// Write a snapshot to `path` atomically.
pub fn write_snapshot<B: HostBytes>(path: &Path, snap: &Snapshot<B>, identity: &Identity) -> Result<(), StateError> {
    let header = Header {
        identity: identity.clone(),
        layout: (*snap.layout).clone(),
        layout_fingerprint: snap.layout.fingerprint(),
        positions: snap.positions,
        classes: snap
            .layout
            .classes
            .iter()
            .zip(&snap.classes)
            .map(|(spec, c)| ClassHeader {
                name: spec.name.clone(),
                written: c.written,
                live_rows: c.live_rows,
                bytes: c.bytes.as_ref().len(),
                sha256: hex(&Sha256::digest(c.bytes.as_ref())),
            })
            .collect(),
    };
    let hjson = serde_json::to_vec(&header).map_err(|e| fmt_err(path, e))?;
    let mut head = Vec::with_capacity(20 + hjson.len() + 32);
    head.extend_from_slice(MAGIC);
    head.extend_from_slice(&VERSION.to_le_bytes());
    head.extend_from_slice(&(hjson.len() as u64).to_le_bytes());
    head.extend_from_slice(&hjson);
    let hsum = Sha256::digest(&head);
    head.extend_from_slice(&hsum);
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let tmp = dir.join(format!(".{}.tmp", path.file_name().map(|n| n.to_string_lossy()).unwrap_or_default()));
    {
        let f = std::fs::File::create(&tmp)?;
        let mut w = std::io::BufWriter::with_capacity(1 << 22, f);
        w.write_all(&head)?;
        for c in &snap.classes {
            w.write_all(c.bytes.as_ref())?;
        }
        let f = w.into_inner().map_err(|e| StateError::Io(e.into_error()))?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)?;
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

/// Read and verify a parked file against the expected identity and layout.
pub fn read_snapshot(path: &Path, identity: &Identity, layout: &Arc<Layout>) -> Result<Snapshot, StateError> {
    let mut f = std::fs::File::open(path).map_err(|e| fmt_err(path, e))?;
    let total = f.metadata()?.len();
    let mut fixed = [0u8; 20];
    f.read_exact(&mut fixed).map_err(|_| fmt_err(path, "truncated: no complete file header"))?;
    if &fixed[..8] != MAGIC {
        return Err(fmt_err(path, "not a memra parked state (bad magic)"));
    }
    let version = u32::from_le_bytes(fixed[8..12].try_into().unwrap());
    if version != VERSION {
        return Err(fmt_err(path, format!("format version {version}, this build reads version {VERSION}")));
    }
    let hlen = u64::from_le_bytes(fixed[12..20].try_into().unwrap());
    if hlen > total.saturating_sub(52) {
        return Err(fmt_err(path, format!("truncated: header of {hlen} bytes does not fit a file of {total}")));
    }
    let mut hjson = vec![0u8; hlen as usize];
    f.read_exact(&mut hjson).map_err(|_| fmt_err(path, "truncated header"))?;
    let mut hsum = [0u8; 32];
    f.read_exact(&mut hsum).map_err(|_| fmt_err(path, "truncated header checksum"))?;
    let mut h = Sha256::new();
    h.update(fixed);
    h.update(&hjson);
    if h.finalize().as_slice() != hsum {
        return Err(fmt_err(path, "header checksum mismatch (the file is corrupted)"));
    }
    let header: Header = serde_json::from_slice(&hjson).map_err(|e| fmt_err(path, format!("header: {e}")))?;
    if &header.identity != identity {
        let diff: Vec<String> = identity
            .iter()
            .filter(|(k, v)| header.identity.get(*k) != Some(*v))
            .map(|(k, v)| format!("{k}: file has {:?}, model has {v:?}", header.identity.get(k)))
            .collect();
        return Err(fmt_err(path, format!("parked from another model ({})", diff.join("; "))));
    }
    if header.layout != **layout || header.layout_fingerprint != layout.fingerprint() {
        return Err(StateError::LayoutMismatch { expected: layout.fingerprint(), got: header.layout_fingerprint });
    }
    let payload = check_classes(path, &header, layout)?;
    let expect = (20 + hlen + 32)
        .checked_add(payload)
        .ok_or_else(|| fmt_err(path, "header inconsistent: the classes' `bytes` overflow the file length"))?;
    if total != expect {
        return Err(fmt_err(
            path,
            format!("length {total} bytes, the header describes {expect} (truncated or padded)"),
        ));
    }
    let mut classes = Vec::with_capacity(header.classes.len());
    for c in &header.classes {
        let mut bytes = vec![0u8; c.bytes];
        f.read_exact(&mut bytes).map_err(|_| fmt_err(path, format!("class `{}`: truncated", c.name)))?;
        if hex(&Sha256::digest(&bytes)) != c.sha256 {
            return Err(fmt_err(path, format!("class `{}`: checksum mismatch (the file is corrupted)", c.name)));
        }
        classes.push(ClassSnapshot { written: c.written, live_rows: c.live_rows, bytes });
    }
    Ok(Snapshot { layout: layout.clone(), positions: header.positions, classes })
}

/// Check that the header lists exactly the layout's classes, each with the
/// counters and size a snapshot at `positions` holds; the payload's length.
fn check_classes(path: &Path, header: &Header, layout: &Layout) -> Result<u64, StateError> {
    let bad = |m: String| fmt_err(path, format!("header inconsistent: {m}"));
    if header.classes.len() != layout.classes.len() {
        return Err(bad(format!(
            "`classes` lists {} classes, the layout has {}",
            header.classes.len(),
            layout.classes.len()
        )));
    }
    let mut payload = 0u64;
    for (i, (spec, c)) in layout.classes.iter().zip(&header.classes).enumerate() {
        if c.name != spec.name {
            return Err(bad(format!("classes[{i}].name is `{}`, the layout's class {i} is `{}`", c.name, spec.name)));
        }
        // rows written by `positions`: a growing class one per
        // `positions_per_row` (the last one open or not yet written), a ring
        // one per position, a fixed class at most its rows
        let p = header.positions as u64;
        let (lo, hi) = match spec.rule {
            CapacityRule::Grows { positions_per_row: r } => (p / r as u64, p.div_ceil(r as u64)),
            CapacityRule::Ring { .. } => (p, p),
            CapacityRule::Fixed { rows } => (0, rows as u64),
        };
        if c.written < lo || c.written > hi {
            return Err(bad(format!(
                "class `{}`: `written` {} rows at `positions` {p}, its rule allows {lo} to {hi}",
                c.name, c.written
            )));
        }
        let live = live_rows(spec, spec.rule.rows_for(header.positions), c.written);
        if c.live_rows != live {
            return Err(bad(format!(
                "class `{}`: `live_rows` {}, {} rows written leave {live} live",
                c.name, c.live_rows, c.written
            )));
        }
        let bytes = live.checked_mul(spec.row_bytes()).ok_or_else(|| {
            bad(format!("class `{}`: `live_rows` {live} of {} bytes overflow", c.name, spec.row_bytes()))
        })?;
        if c.bytes != bytes {
            return Err(bad(format!("class `{}`: `bytes` {}, {live} live rows hold {bytes}", c.name, c.bytes)));
        }
        payload = payload
            .checked_add(bytes as u64)
            .ok_or_else(|| bad(format!("class `{}`: the classes' `bytes` overflow", c.name)))?;
    }
    Ok(payload)
}

/// Snapshot `state` and park it at `path`.
pub fn park<S: StateStore + ?Sized>(state: &S, path: &Path, identity: &Identity) -> Result<usize, StateError> {
    let snap = snapshot(state)?;
    write_snapshot(path, &snap, identity)?;
    Ok(snap.bytes())
}

/// Load `path` and restore it into `state` (equal or larger capacity). On
/// any error `state` is untouched.
pub fn unpark<S: StateStore + ?Sized>(path: &Path, identity: &Identity, state: &mut S) -> Result<(), StateError> {
    let snap = read_snapshot(path, identity, state.layout())?;
    restore(&snap, state)
}
