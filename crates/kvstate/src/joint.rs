//! Two states that advance together, seen as one: a decoder and the drafter
//! that follows it, for instance. Snapshots, restores, park files and
//! comparisons then cover both in one piece.

use std::sync::Arc;

use crate::layout::{ClassSpec, Layout};
use crate::state::StateStore;
use crate::StateError;

/// The classes of `first` (names prefixed `"{names.0}/"`), then those of
/// `second` (prefixed `"{names.1}/"`). Both parts hold the same number of
/// positions; the joint capacity is the smaller of the two.
pub struct Joint<A, B> {
    pub first: A,
    pub second: B,
    layout: Arc<Layout>,
    split: usize,
}

impl<A: StateStore, B: StateStore> Joint<A, B> {
    pub fn new(names: (&str, &str), first: A, second: B) -> Result<Self, StateError> {
        if first.positions() != second.positions() {
            return Err(StateError::Format(format!(
                "joint state: `{}` holds {} positions, `{}` holds {}",
                names.0,
                first.positions(),
                names.1,
                second.positions()
            )));
        }
        let prefixed = |name: &str, l: &Layout| -> Vec<ClassSpec> {
            l.classes.iter().map(|c| ClassSpec { name: format!("{name}/{}", c.name), ..c.clone() }).collect()
        };
        let mut classes = prefixed(names.0, first.layout());
        let split = classes.len();
        classes.extend(prefixed(names.1, second.layout()));
        let layout = Arc::new(Layout::new(classes)?);
        Ok(Joint { first, second, layout, split })
    }

    pub fn into_parts(self) -> (A, B) {
        (self.first, self.second)
    }
}

impl<A: StateStore, B: StateStore> StateStore for Joint<A, B> {
    fn layout(&self) -> &Arc<Layout> {
        &self.layout
    }
    fn capacity(&self) -> usize {
        self.first.capacity().min(self.second.capacity())
    }
    fn positions(&self) -> usize {
        self.first.positions()
    }
    fn set_positions(&mut self, positions: usize) {
        self.first.set_positions(positions);
        self.second.set_positions(positions);
    }
    fn written(&self, class: usize) -> u64 {
        let (part, c) = self.part(class);
        part.written(c)
    }
    fn read_live(&self, class: usize, out: &mut [u8]) -> Result<(), StateError> {
        let (part, c) = self.part(class);
        part.read_live(c, out)
    }
    fn write_live(&mut self, class: usize, written: u64, rows: &[u8]) -> Result<(), StateError> {
        let (part, c) = self.part_mut(class);
        part.write_live(c, written, rows)
    }
    fn truncate(&mut self, class: usize, written: u64) -> Result<(), StateError> {
        let (part, c) = self.part_mut(class);
        part.truncate(c, written)
    }
    fn rows(&self, class: usize) -> usize {
        let (part, c) = self.part(class);
        part.rows(c)
    }
}

impl<A: StateStore, B: StateStore> Joint<A, B> {
    /// The part that holds joint class `class`, and its index there.
    fn part(&self, class: usize) -> (&dyn StateStore, usize) {
        match class.checked_sub(self.split) {
            None => (&self.first, class),
            Some(i) => (&self.second, i),
        }
    }
    fn part_mut(&mut self, class: usize) -> (&mut dyn StateStore, usize) {
        match class.checked_sub(self.split) {
            None => (&mut self.first, class),
            Some(i) => (&mut self.second, i),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{restore, snapshot, CapacityRule, ElemType, HostState};

    fn part(name: &str, rule: CapacityRule, capacity: usize) -> HostState {
        let l = Layout::new(vec![ClassSpec::new(name, 2, ElemType::F32, rule)]).unwrap();
        HostState::new(Arc::new(l), capacity)
    }

    fn fill(j: &mut Joint<HostState, HostState>, n: usize) {
        for p in 0..n {
            j.first.push_row_f32(0, &[p as f32, 1.0]).unwrap();
            j.second.push_row_f32(0, &[p as f32, 2.0]).unwrap();
        }
        j.set_positions(n);
    }

    #[test]
    fn a_joint_snapshot_restores_both_parts_into_larger_ones() {
        let mut a = Joint::new(
            ("trunk", "drafter"),
            part("kv", CapacityRule::Grows { positions_per_row: 1 }, 16),
            part("ring", CapacityRule::Ring { rows: 4 }, 32),
        )
        .unwrap();
        assert_eq!(a.capacity(), 16);
        let names: Vec<_> = a.layout().classes.iter().map(|c| c.name.clone()).collect();
        assert_eq!(names, ["trunk/kv", "drafter/ring"]);
        fill(&mut a, 10);
        let s = snapshot(&a).unwrap();
        assert_eq!(s.classes[1].live_rows, 4);
        let mut b = Joint::new(
            ("trunk", "drafter"),
            part("kv", CapacityRule::Grows { positions_per_row: 1 }, 64),
            part("ring", CapacityRule::Ring { rows: 4 }, 64),
        )
        .unwrap();
        restore(&s, &mut b).unwrap();
        assert_eq!(b.second.positions(), 10);
        assert_eq!(b.second.row_f32(0, 9), &[9.0, 2.0]);
        assert_eq!(b.first.row_f32(0, 0), &[0.0, 1.0]);
        assert!(snapshot(&b).unwrap().differing_classes(&s).is_empty());
        // a change in the second part alone is seen
        b.second.truncate(0, 9).unwrap();
        b.second.push_row_f32(0, &[9.5, 2.0]).unwrap();
        assert_eq!(snapshot(&b).unwrap().differing_classes(&s), ["drafter/ring"]);
    }

    #[test]
    fn parts_at_different_positions_are_refused() {
        let mut first = part("kv", CapacityRule::Grows { positions_per_row: 1 }, 8);
        first.set_positions(3);
        let second = part("ring", CapacityRule::Ring { rows: 4 }, 8);
        let e = Joint::new(("trunk", "drafter"), first, second).err().unwrap().to_string();
        assert!(e.contains("`trunk` holds 3 positions, `drafter` holds 0"), "{e}");
    }
}
