//! The embedding example (`examples/replicated_counter.rs`) runs in the test suite: three
//! U-Ring Paxos replicas behind `NodeHandle`s agree on the counter.

#[path = "../../../examples/replicated_counter.rs"]
mod example;

#[test]
fn the_replicated_counter_example_runs_and_replicas_agree() {
    let totals = example::run().expect("the example runs");
    assert_eq!(totals, vec![465, 465, 465]);
}
