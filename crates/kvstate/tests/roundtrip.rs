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
