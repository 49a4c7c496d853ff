//! kvstate without any model: a toy streaming decoder whose state is a ring
//! of the last 8 symbols and a growing list of per-16-position histograms.
//! It runs, parks its state to disk mid-stream, loads it into a larger
//! state, and checks both continue to the same result.
//!
//!     cargo run -p kvstate --example window_counter

use std::sync::Arc;

use kvstate::{park, unpark, CapacityRule, ClassSpec, ElemType, HostState, Identity, Layout, StateStore};

struct Decoder {
    layout: Arc<Layout>,
}

impl Decoder {
    fn new() -> Self {
        let layout = Layout::new(vec![
            ClassSpec::new("recent", 1, ElemType::F32, CapacityRule::Ring { rows: 8 }),
            ClassSpec::new("histograms", 4, ElemType::F32, CapacityRule::Grows { positions_per_row: 16 }),
        ])
        .unwrap();
        Decoder { layout: Arc::new(layout) }
    }

    /// Consume one symbol (0..4); returns the mean of the last 8 symbols.
    fn step(&self, st: &mut HostState, sym: u32) -> f32 {
        let pos = st.positions();
        st.push_row_f32(0, &[sym as f32]).unwrap();
        if (pos + 1).is_multiple_of(16) {
            let mut h = [0f32; 4];
            let live = st.live_rows(0) as u64;
            for i in st.written(0) - live..st.written(0) {
                h[st.row_f32(0, i)[0] as usize] += 1.0;
            }
            st.push_row_f32(1, &h).unwrap();
        }
        st.set_positions(pos + 1);
        let live = st.live_rows(0) as u64;
        (st.written(0) - live..st.written(0)).map(|i| st.row_f32(0, i)[0]).sum::<f32>() / live as f32
    }
}

fn main() {
    let d = Decoder::new();
    let mut a = HostState::new(d.layout.clone(), 100);
    let syms: Vec<u32> = (0..100u32).map(|i| (i * 7 + i / 5) % 4).collect();
    for &s in &syms[..40] {
        d.step(&mut a, s);
    }
    let mut id = Identity::new();
    id.insert("decoder".into(), "window_counter v1".into());
    let path = std::env::temp_dir().join("window_counter.kvstate");
    let bytes = park(&a, &path, &id).unwrap();
    let mut b = HostState::new(d.layout.clone(), 200);
    unpark(&path, &id, &mut b).unwrap();
    let (mut ra, mut rb) = (0.0, 0.0);
    for &s in &syms[40..] {
        ra = d.step(&mut a, s);
        rb = d.step(&mut b, s);
        assert_eq!(ra.to_bits(), rb.to_bits());
    }
    assert_eq!(a.written(1), b.written(1));
    println!("parked {bytes} bytes at position 40; both states ended at mean {ra} = {rb} after 100 symbols");
}
