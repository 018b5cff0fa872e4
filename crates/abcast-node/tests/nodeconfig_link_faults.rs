//! `[[link_faults]]` in the node config: rules parse into the transport config, the harness
//! helper writes the same rules back, and bad rules are refused by field name. (The link
//! faults themselves are tested with the runtime, `abcast-runtime/tests/runtime_linkfault.rs`.)

use abcast_core::NodeId;
use abcast_core::codec::Lane;
use abcast_node::nodeconfig::{self, NodeConfigError};
use abcast_runtime::LinkFault;
use std::path::Path;

fn config_with(faults: &str) -> String {
    format!("{}\n{faults}", nodeconfig::local_cluster(3, 7400))
}

fn invalid_field(faults: &str) -> (String, String) {
    match nodeconfig::parse(&config_with(faults), Some(0), Path::new("/tmp")) {
        Err(NodeConfigError::Invalid { field, reason }) => (field, reason),
        other => panic!("expected an Invalid error, got {other:?}"),
    }
}

#[test]
fn link_fault_rules_parse_into_the_transport_config() {
    let text = config_with(
        "[[link_faults]]\nfrom = 0\nto = 1\ndelay_us = 5000\nloss_ppm = 1000\n\
         [[link_faults]]\nfrom = 2\nloss_ppm = 1000000\n",
    );
    let c = nodeconfig::parse(&text, Some(1), Path::new("/tmp")).unwrap();
    assert_eq!(
        c.transport.link_faults,
        [
            LinkFault::link(NodeId(0), NodeId(1), 5000, 1000),
            LinkFault {
                from: Some(NodeId(2)),
                ..LinkFault::everywhere(0, 1_000_000)
            }
        ]
    );
    // The harness helper writes the same rules back.
    let mut table: toml::Table = toml::from_str(&nodeconfig::local_cluster(3, 7400)).unwrap();
    table.insert(
        "link_faults".into(),
        nodeconfig::link_faults_toml(&c.transport.link_faults),
    );
    let again = nodeconfig::parse(&table.to_string(), Some(1), Path::new("/tmp")).unwrap();
    assert_eq!(again.transport.link_faults, c.transport.link_faults);
    // No rules: nothing to apply.
    let plain = nodeconfig::parse(&config_with(""), Some(0), Path::new("/tmp")).unwrap();
    assert!(plain.transport.link_faults.is_empty());
}

#[test]
fn a_link_fault_may_name_a_lane_and_is_written_back_with_it() {
    let text = config_with(
        "[[link_faults]]\nloss_ppm = 200000\nlane = \"data\"\n\
         [[link_faults]]\nfrom = 0\nto = 1\ndelay_us = 10\nlane = \"control\"\n",
    );
    let c = nodeconfig::parse(&text, Some(1), Path::new("/tmp")).unwrap();
    assert_eq!(
        c.transport.link_faults,
        [
            LinkFault::everywhere(0, 200_000).on_lane(Lane::Data),
            LinkFault::link(NodeId(0), NodeId(1), 10, 0).on_lane(Lane::Control),
        ]
    );
    let mut table: toml::Table = toml::from_str(&nodeconfig::local_cluster(3, 7400)).unwrap();
    table.insert(
        "link_faults".into(),
        nodeconfig::link_faults_toml(&c.transport.link_faults),
    );
    let again = nodeconfig::parse(&table.to_string(), Some(1), Path::new("/tmp")).unwrap();
    assert_eq!(again.transport.link_faults, c.transport.link_faults);
    // One link may have a rule per lane, but not two for the same lane.
    let (field, reason) = invalid_field(
        "[[link_faults]]\nloss_ppm = 5\nlane = \"data\"\n\
         [[link_faults]]\nfrom = 2\nloss_ppm = 5\nlane = \"data\"\n",
    );
    assert_eq!(field, "link_faults[1]");
    assert!(reason.contains("on the data lane"), "{reason}");
}

#[test]
fn bad_link_fault_rules_are_refused_by_field() {
    let (field, reason) = invalid_field("[[link_faults]]\nloss_ppm = 5\nlane = \"token\"\n");
    assert_eq!(field, "link_faults[0].lane");
    assert!(
        reason.contains("\"token\"") && reason.contains("\"data\""),
        "{reason}"
    );
    let (field, reason) = invalid_field("[[link_faults]]\nfrom = 0\nto = 9\ndelay_us = 10\n");
    assert_eq!(field, "link_faults[0].to");
    assert!(reason.contains("not among the members"), "{reason}");
    let (field, _) = invalid_field("[[link_faults]]\nfrom = 7\n");
    assert_eq!(field, "link_faults[0].from");
    let (field, reason) = invalid_field("[[link_faults]]\nloss_ppm = 1000001\n");
    assert_eq!(field, "link_faults[0].loss_ppm");
    assert!(reason.contains("1000000"), "{reason}");
    let (field, _) = invalid_field("[[link_faults]]\nloss_ppm = 99999999999\n");
    assert_eq!(field, "link_faults[0].loss_ppm");
    let (field, _) = invalid_field("[[link_faults]]\ndelay_us = 10000001\n");
    assert_eq!(field, "link_faults[0].delay_us");
    let (field, _) = invalid_field("[[link_faults]]\nfrom = 1\nto = 1\ndelay_us = 5\n");
    assert_eq!(field, "link_faults[0].to");
    // `from = 0` covers 0 -> 1 and 0 -> 2; a second rule for 0 -> 1 overlaps it.
    let (field, reason) = invalid_field(
        "[[link_faults]]\nfrom = 0\ndelay_us = 5\n[[link_faults]]\nfrom = 0\nto = 1\nloss_ppm = 5\n",
    );
    assert_eq!(field, "link_faults[1]");
    assert!(
        reason.contains("0 -> 1") && reason.contains("link_faults[0]"),
        "{reason}"
    );
    // A rule about other nodes' links is still checked on every node.
    let (field, _) = invalid_field("[[link_faults]]\nfrom = 2\nto = 1\nloss_ppm = 2000000\n");
    assert_eq!(field, "link_faults[0].loss_ppm");
    // Unknown keys are syntax errors naming the key.
    match nodeconfig::parse(
        &config_with("[[link_faults]]\ndelay_ms = 5\n"),
        Some(0),
        Path::new("/tmp"),
    ) {
        Err(NodeConfigError::Syntax(m)) => assert!(m.contains("delay_ms"), "{m}"),
        other => panic!("{other:?}"),
    }
}
