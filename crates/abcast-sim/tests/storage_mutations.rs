//! The storage layer's deliberately broken variants (`abcast_core::mutation`, built with the
//! `mutations` feature this crate's tests turn on), each caught by the test that guards the
//! rule it removes, while the correct code passes the same test.
//!
//! `SegLogZeroTailInEarlierSegment` (issue 33, suspect 7): recovery cut zeros at the end of
//! any segment and went on with the next, so a group whose records in an earlier segment
//! were lost was applied in part under its commit marker in the next. No sweep meets it
//! (the simulator's disks never lose synced bytes), so its catcher is the unit test's check
//! (`abcast_core::storage::seglog::check`), run here on both variants.

use abcast_core::mutation::{Mutation, Slot};
use abcast_core::storage::seglog::check;

#[test]
fn seglog_cutting_zeros_in_an_earlier_segment_is_caught() {
    const { assert!(abcast_core::mutation::AVAILABLE, "built without mutations") };
    assert_eq!(
        check::earlier_segment_zero_tails(Slot::default()),
        Ok(()),
        "the correct log refuses both damaged logs"
    );
    let mut broken = Slot::default();
    broken
        .set(Some(Mutation::SegLogZeroTailInEarlierSegment))
        .expect("a build with mutations");
    match check::earlier_segment_zero_tails(broken) {
        Ok(()) => panic!(
            "the mutation {} was not caught",
            Mutation::SegLogZeroTailInEarlierSegment
        ),
        Err(e) => {
            eprintln!("caught: {e}");
            assert!(e.contains("applied"), "{e}");
        }
    }
}
