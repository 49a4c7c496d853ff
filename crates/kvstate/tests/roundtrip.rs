//! Snapshot, restore, grow and park round trips over random layouts, and the
//! park file's refusal of damaged, foreign and mismatched files.

use std::sync::Arc;

use kvstate::*;
use proptest::prelude::*;

fn rule() -> impl Strategy<Value = CapacityRule> {
    prop_oneof![
        (1usize..6).prop_map(|p| CapacityRule::Grows { positions_per_row: p }),
        (1usize..9).prop_map(|r| CapacityRule::Ring { rows: r }),
        (1usize..5).prop_map(|r| CapacityRule::Fixed { rows: r }),
    ]
}

fn layout() -> impl Strategy<Value = Layout> {
    prop::collection::vec(
        (rule(), 1usize..7, prop_oneof![Just(ElemType::F32), Just(ElemType::U8), Just(ElemType::BF16)]),
        1..6,
    )
    .prop_map(|v| {
        Layout::new(v.into_iter().enumerate().map(|(i, (r, w, e))| ClassSpec::new(format!("c{i}"), w, e, r)).collect())
            .unwrap()
    })
}

/// Fill a state as a decoder would: rows appended per position, contents a
/// function of (class, stream index) so any misplacement shows.
fn fill(st: &mut HostState, positions: usize) {
    let layout = st.layout().clone();
    for (i, spec) in layout.classes.iter().enumerate() {
        let rows = match spec.rule {
            CapacityRule::Grows { positions_per_row } => positions / positions_per_row,
            CapacityRule::Ring { .. } => positions,
            CapacityRule::Fixed { rows } => rows.min(positions),
        };
        let rb = spec.row_bytes();
        let cap_rows = st.rows(i);
        let live = match spec.rule {
            CapacityRule::Ring { .. } => rows.min(cap_rows),
            _ => rows,
        };
        let mut bytes = vec![0u8; live * rb];
        for k in 0..live {
            let stream_idx = rows - live + k;
            for b in 0..rb {
                bytes[k * rb + b] = (i * 131 + stream_idx * 7 + b * 3) as u8;
            }
        }
        st.write_live(i, rows as u64, &bytes).unwrap();
    }
    st.set_positions(positions);
}

proptest! {
    #[test]
    fn snapshot_restore_grow_round_trips(l in layout(), positions in 0usize..40, grow in 0usize..50) {
        let l = Arc::new(l);
        let mut a = HostState::new(l.clone(), positions.max(1));
        fill(&mut a, positions);
        let s = snapshot(&a).unwrap();
        prop_assert_eq!(s.bytes(), a.live_bytes());
        let mut b = HostState::new(l.clone(), positions.max(1) + grow);
        restore(&s, &mut b).unwrap();
        let s2 = snapshot(&b).unwrap();
        prop_assert!(s.differing_classes(&s2).is_empty());
        // ring classes keep their head: the same stream row sits in the same slot
        for (i, spec) in l.classes.iter().enumerate() {
            if let CapacityRule::Ring { .. } = spec.rule {
                prop_assert_eq!(a.class(i).data.as_bytes(), b.class(i).data.as_bytes());
            }
            if let CapacityRule::Grows { .. } = spec.rule {
                let n = a.live_rows(i) * spec.row_bytes();
                prop_assert_eq!(&a.class(i).data.as_bytes()[..n], &b.class(i).data.as_bytes()[..n]);
            }
        }
        // park to disk and back
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("s.kv");
        let mut id = Identity::new();
        id.insert("model".into(), "m".into());
        park(&a, &p, &id).unwrap();
        let mut c = HostState::new(l.clone(), positions.max(1) + grow);
        unpark(&p, &id, &mut c).unwrap();
        prop_assert!(s.differing_classes(&snapshot(&c).unwrap()).is_empty());
    }
}

fn sample() -> (Arc<Layout>, HostState, Identity) {
    let l = Arc::new(
        Layout::new(vec![
            ClassSpec::new("win", 4, ElemType::F32, CapacityRule::Ring { rows: 8 }),
            ClassSpec::new("entries", 3, ElemType::F32, CapacityRule::Grows { positions_per_row: 4 }),
        ])
        .unwrap(),
    );
    let mut s = HostState::new(l.clone(), 64);
    fill(&mut s, 37);
    let mut id = Identity::new();
    id.insert("weights_sha256".into(), "abc".into());
    (l, s, id)
}

fn untouched(st: &HostState) -> bool {
    st.positions() == 0 && (0..st.layout().classes.len()).all(|i| st.written(i) == 0)
}

#[test]
fn damaged_files_are_refused_and_leave_the_target_untouched() {
    let (l, s, id) = sample();
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("s.kv");
    park(&s, &p, &id).unwrap();
    let good = std::fs::read(&p).unwrap();
    let hlen = u64::from_le_bytes(good[12..20].try_into().unwrap()) as usize;
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("truncated payload", good[..good.len() - 5].to_vec(), "truncated"),
        ("truncated header", good[..30].to_vec(), "truncated"),
        ("empty", vec![], "truncated"),
        (
            "bad magic",
            {
                let mut b = good.clone();
                b[0] ^= 1;
                b
            },
            "magic",
        ),
        (
            "future version",
            {
                let mut b = good.clone();
                b[8] = 9;
                b
            },
            "version",
        ),
        (
            "bit flip in header",
            {
                let mut b = good.clone();
                b[25] ^= 4;
                b
            },
            "checksum",
        ),
        (
            "bit flip in payload",
            {
                let mut b = good.clone();
                let n = b.len();
                b[n - 3] ^= 0x10;
                b
            },
            "checksum",
        ),
        (
            "padded",
            {
                let mut b = good.clone();
                b.push(0);
                b
            },
            "length",
        ),
    ];
    assert!(hlen > 0);
    for (what, bytes, want) in cases {
        std::fs::write(&p, &bytes).unwrap();
        let mut t = HostState::new(l.clone(), 64);
        let e = unpark(&p, &id, &mut t).expect_err(what).to_string();
        assert!(e.contains(want), "{what}: {e}");
        assert!(untouched(&t), "{what}: target modified");
    }
}

#[test]
fn foreign_model_and_other_layout_are_refused() {
    let (l, s, id) = sample();
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("s.kv");
    park(&s, &p, &id).unwrap();
    let mut other = id.clone();
    other.insert("weights_sha256".into(), "def".into());
    let mut t = HostState::new(l.clone(), 64);
    let e = unpark(&p, &other, &mut t).unwrap_err().to_string();
    assert!(e.contains("another model") && e.contains("weights_sha256"), "{e}");
    assert!(untouched(&t));
    let l2 =
        Arc::new(Layout::new(vec![ClassSpec::new("win", 5, ElemType::F32, CapacityRule::Ring { rows: 8 })]).unwrap());
    let mut t2 = HostState::new(l2, 64);
    let e = unpark(&p, &id, &mut t2).unwrap_err().to_string();
    assert!(e.contains("layout mismatch"), "{e}");
    // a smaller capacity than the parked positions is refused before any write
    let mut t3 = HostState::new(l.clone(), 8);
    let e = unpark(&p, &id, &mut t3).unwrap_err().to_string();
    assert!(e.contains("capacity"), "{e}");
    assert!(untouched(&t3));
}

/// A state of `layout` and `capacity` filled to `positions`, parked at `p`,
/// as its header JSON and payload.
fn parked(
    layout: &Arc<Layout>,
    capacity: usize,
    positions: usize,
    p: &std::path::Path,
    id: &Identity,
) -> (serde_json::Value, Vec<u8>) {
    let mut st = HostState::new(layout.clone(), capacity);
    fill(&mut st, positions);
    park(&st, p, id).unwrap();
    split_file(&std::fs::read(p).unwrap())
}

/// A parked file split into its header JSON and its payload.
fn split_file(file: &[u8]) -> (serde_json::Value, Vec<u8>) {
    let hlen = u64::from_le_bytes(file[12..20].try_into().unwrap()) as usize;
    (serde_json::from_slice(&file[20..20 + hlen]).unwrap(), file[20 + hlen + 32..].to_vec())
}

/// A parked file with `header` and `payload`, the header checksum recomputed.
fn join_file(header: &serde_json::Value, payload: &[u8]) -> Vec<u8> {
    use sha2::Digest;
    let json = serde_json::to_vec(header).unwrap();
    let mut b = Vec::new();
    b.extend_from_slice(kvstate::park::MAGIC);
    b.extend_from_slice(&kvstate::park::VERSION.to_le_bytes());
    b.extend_from_slice(&(json.len() as u64).to_le_bytes());
    b.extend_from_slice(&json);
    let sum = sha2::Sha256::digest(&b);
    b.extend_from_slice(&sum);
    b.extend_from_slice(payload);
    b
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

/// Write `file` at `p`, expect `read_snapshot` and `unpark` (into a state
/// filled to 5 positions) to refuse it with a message holding every `want`,
/// and the target to keep its contents.
fn refused(p: &std::path::Path, l: &Arc<Layout>, id: &Identity, file: &[u8], what: &str, want: &[&str]) {
    std::fs::write(p, file).unwrap();
    let e = match read_snapshot(p, id, l) {
        Ok(s) => panic!("{what}: accepted ({} classes, {} positions)", s.classes.len(), s.positions),
        Err(e) => e.to_string(),
    };
    for w in want {
        assert!(e.contains(w), "{what}: `{w}` not in: {e}");
    }
    let mut t = HostState::new(l.clone(), 64);
    fill(&mut t, 5);
    let before = snapshot(&t).unwrap();
    assert!(unpark(p, id, &mut t).is_err(), "{what}: unpark accepted");
    assert!(snapshot(&t).unwrap().differing_classes(&before).is_empty(), "{what}: target modified");
}

#[test]
fn a_header_must_list_exactly_the_layout_classes() {
    let (l, s, id) = sample();
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("s.kv");
    park(&s, &p, &id).unwrap();
    let (h, payload) = split_file(&std::fs::read(&p).unwrap());
    let win = h["classes"][0]["bytes"].as_u64().unwrap() as usize;
    // only the first class, with only its payload
    let mut one = h.clone();
    one["classes"].as_array_mut().unwrap().truncate(1);
    refused(&p, &l, &id, &join_file(&one, &payload[..win]), "one of two classes", &["header inconsistent", "classes"]);
    // a third class the layout does not have, with its bytes appended
    let mut three = h.clone();
    let ghost =
        serde_json::json!({"name": "ghost", "written": 1, "live_rows": 1, "bytes": 4, "sha256": sha256_hex(&[7; 4])});
    three["classes"].as_array_mut().unwrap().push(ghost);
    let mut more = payload.clone();
    more.extend_from_slice(&[7; 4]);
    refused(&p, &l, &id, &join_file(&three, &more), "an extra class", &["header inconsistent", "classes"]);
    // the classes in the other order, payload reordered to match
    let mut swapped = h.clone();
    swapped["classes"].as_array_mut().unwrap().swap(0, 1);
    let mut sp = payload[win..].to_vec();
    sp.extend_from_slice(&payload[..win]);
    refused(&p, &l, &id, &join_file(&swapped, &sp), "classes reordered", &["header inconsistent", "name"]);
}

#[test]
fn a_header_must_hold_the_rows_its_positions_imply() {
    let (l, s, id) = sample();
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("s.kv");
    park(&s, &p, &id).unwrap();
    let (h, payload) = split_file(&std::fs::read(&p).unwrap());
    // positions 37 -> 40: the ring wrote 37 rows, the entries 9 (of 10)
    let mut later = h.clone();
    later["positions"] = 40.into();
    refused(
        &p,
        &l,
        &id,
        &join_file(&later, &payload),
        "positions raised",
        &["header inconsistent", "positions", "written"],
    );
    // the entries class one row short of what 37 positions close (9), its
    // bytes and checksum made to match
    let win = h["classes"][0]["bytes"].as_u64().unwrap() as usize;
    let mut short = h.clone();
    let entries = &payload[win..payload.len() - 12];
    short["classes"][1]["written"] = 8.into();
    short["classes"][1]["live_rows"] = 8.into();
    short["classes"][1]["bytes"] = entries.len().into();
    short["classes"][1]["sha256"] = sha256_hex(entries).into();
    refused(&p, &l, &id, &join_file(&short, &payload[..payload.len() - 12]), "entries short", &["entries", "written"]);
    // the ring claims 7 live rows (of 8), the oldest dropped
    let mut ring = h.clone();
    ring["classes"][0]["live_rows"] = 7.into();
    ring["classes"][0]["bytes"] = (win - 16).into();
    ring["classes"][0]["sha256"] = sha256_hex(&payload[16..win]).into();
    refused(&p, &l, &id, &join_file(&ring, &payload[16..]), "ring live rows", &["win", "live_rows"]);

    // a state of 3 positions, 3 rows written in each class, claiming 7
    let l3 = Arc::new(
        Layout::new(vec![
            ClassSpec::new("kv", 2, ElemType::F32, CapacityRule::Grows { positions_per_row: 1 }),
            ClassSpec::new("win", 2, ElemType::F32, CapacityRule::Ring { rows: 4 }),
        ])
        .unwrap(),
    );
    let (mut h3, payload3) = parked(&l3, 16, 3, &p, &id);
    h3["positions"] = 7.into();
    refused(&p, &l3, &id, &join_file(&h3, &payload3), "3 rows at 7 positions", &["kv", "positions", "written"]);
}

#[test]
fn header_sizes_that_overflow_are_refused_by_name() {
    let (l, s, id) = sample();
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("s.kv");
    park(&s, &p, &id).unwrap();
    let (h, payload) = split_file(&std::fs::read(&p).unwrap());
    // byte counts that wrap to the true payload length when summed
    let mut wrap = h.clone();
    for c in wrap["classes"].as_array_mut().unwrap() {
        c["bytes"] = (c["bytes"].as_u64().unwrap() + (1 << 63)).into();
    }
    refused(&p, &l, &id, &join_file(&wrap, &payload), "bytes wrap", &["header inconsistent", "bytes"]);

    // live rows whose byte count wraps to 3 rows' worth: a growing class of
    // one row per position (16-byte rows), 2^60 + 3 positions
    let big = Arc::new(
        Layout::new(vec![ClassSpec::new("kv", 4, ElemType::F32, CapacityRule::Grows { positions_per_row: 1 })])
            .unwrap(),
    );
    let (mut hb, pb) = parked(&big, 8, 3, &p, &id);
    let n = (1u64 << 60) + 3;
    hb["positions"] = n.into();
    hb["classes"][0]["written"] = n.into();
    hb["classes"][0]["live_rows"] = n.into();
    refused(&p, &big, &id, &join_file(&hb, &pb), "live rows x row bytes wrap", &["header inconsistent", "live_rows"]);

    // two classes of 2^63 + 24 bytes each (8-byte rows): their sum wraps
    let two = Arc::new(
        Layout::new(vec![
            ClassSpec::new("k", 2, ElemType::F32, CapacityRule::Grows { positions_per_row: 1 }),
            ClassSpec::new("v", 2, ElemType::F32, CapacityRule::Grows { positions_per_row: 1 }),
        ])
        .unwrap(),
    );
    let (mut h2, p2) = parked(&two, 8, 3, &p, &id);
    h2["positions"] = n.into();
    for c in h2["classes"].as_array_mut().unwrap() {
        c["written"] = n.into();
        c["live_rows"] = n.into();
        c["bytes"] = (n * 8).into();
    }
    refused(&p, &two, &id, &join_file(&h2, &p2), "class bytes sum wraps", &["header inconsistent", "bytes"]);

    // one class of 2^64 - 2 one-byte rows: with the header's length it wraps
    let bytes = Arc::new(
        Layout::new(vec![ClassSpec::new("b", 1, ElemType::U8, CapacityRule::Grows { positions_per_row: 1 })]).unwrap(),
    );
    let (mut h1, p1) = parked(&bytes, 8, 3, &p, &id);
    let m = u64::MAX - 1;
    h1["positions"] = m.into();
    h1["classes"][0]["written"] = m.into();
    h1["classes"][0]["live_rows"] = m.into();
    h1["classes"][0]["bytes"] = m.into();
    refused(&p, &bytes, &id, &join_file(&h1, &p1), "payload + header wraps", &["header inconsistent", "bytes"]);
}
