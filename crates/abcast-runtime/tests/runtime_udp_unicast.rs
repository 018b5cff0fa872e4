//! Messages to one peer by UDP datagram (`TransportConfig::unicast = Udp`): U-Ring Paxos,
//! unchanged, over real UDP sockets on loopback agrees and delivers every value once; it
//! still does with a fifth of all datagrams lost (the ring repairs what is lost); and a
//! message too large for one datagram goes by TCP instead of vanishing. Nothing here
//! asserts on timing: waits are generous bounds on conditions.

mod runtime_support;

use abcast_core::config::StartInfo;
use abcast_core::storage::MemoryStore;
use abcast_core::uring::{RingConfig, URing};
use abcast_runtime::transport::Unicast;
use abcast_runtime::{LinkFault, LoadConfig, TransportConfig, TransportStats};
use runtime_support::*;

fn ring() -> RingConfig {
    // Retransmission timers far below the defaults, so repairs of lost datagrams take
    // milliseconds; the failure timeout spans ten heartbeats.
    RingConfig {
        p1_resend_us: 100_000,
        p2_resend_us: 100_000,
        value_resend_us: 300_000,
        retrieve_timeout_us: 50_000,
        heartbeat_interval_us: 50_000,
        failure_timeout_us: 500_000,
        max_value_bytes: 1 << 20,
        ..RingConfig::pal(&[0, 1, 2])
    }
}

fn udp(link_faults: Vec<LinkFault>) -> TransportConfig {
    TransportConfig {
        unicast: Unicast::Udp,
        link_faults,
        ..TransportConfig::default()
    }
}

/// Three PAL nodes each propose `values` values of `value_bytes`; waits for every learner
/// to deliver all of them, checks agreement, and returns each node's counters.
fn run(transport: TransportConfig, load: Option<LoadConfig>, total: usize) -> Vec<TransportStats> {
    let ring = ring();
    let nodes = cluster(
        3,
        load,
        transport,
        false,
        |_, _, a| a,
        |me| {
            let store = MemoryStore::new(ring.store_capacity_instances, ring.store_capacity_bytes);
            URing::new(ring.clone(), me, StartInfo::FRESH, Box::new(store)).unwrap()
        },
    );
    assert!(
        wait_until(PATIENCE, || all_delivered(&nodes, total)),
        "not all values delivered in time: {:?}",
        nodes
            .iter()
            .map(|n| n.recorder.delivered_count())
            .collect::<Vec<_>>()
    );
    // One sequence of `total` distinct values at every learner.
    assert_agreement(&nodes, total);
    nodes
        .into_iter()
        .map(|n| n.stop().transport_stats())
        .collect()
}

#[test]
fn uring_agrees_over_udp_unicast() {
    let stats = run(udp(Vec::new()), load_of(500, 1000, 32), 1500);
    let sent: u64 = stats.iter().map(|s| s.unicast.datagrams_sent).sum();
    let received: u64 = stats.iter().map(|s| s.unicast.datagrams_received).sum();
    let rejected: u64 = stats.iter().map(|s| s.unicast.datagrams_rejected).sum();
    let by_udp: u64 = stats.iter().map(|s| s.sends_by_udp).sum();
    eprintln!("per node: {stats:?}");
    assert!(sent > 0 && received > 0, "no datagram went: {stats:?}");
    assert!(by_udp > 0);
    assert_eq!(rejected, 0, "datagrams of our own cluster were rejected");
    // Every message fit a datagram: no TCP connection was ever needed.
    let t = sum_stats(&stats);
    assert_eq!(t.connects, 0, "a message went by TCP: {t:?}");
    assert_eq!(t.bad_input_closes, 0);
}

#[test]
fn uring_agrees_over_udp_unicast_with_a_fifth_of_all_datagrams_lost() {
    let stats = run(
        udp(vec![LinkFault::everywhere(0, 200_000)]),
        load_of(100, 64, 16),
        300,
    );
    let lost: u64 = stats.iter().map(|s| s.frames_lost).sum();
    let by_udp: u64 = stats.iter().map(|s| s.sends_by_udp).sum();
    assert!(lost > 0, "the injected loss dropped nothing: {stats:?}");
    assert!(by_udp > 0);
}

#[test]
fn a_message_too_large_for_a_datagram_goes_by_tcp() {
    // A value of 100 000 bytes cannot travel in one datagram (65 000 at most): its
    // `Forward` and phase 2 must take TCP; the small messages still go by UDP.
    let stats = run(udp(Vec::new()), load_of(10, 100_000, 4), 30);
    let t = sum_stats(&stats);
    let by_udp: u64 = stats.iter().map(|s| s.sends_by_udp).sum();
    assert!(
        t.connects > 0,
        "no TCP connection carried the large messages"
    );
    assert!(by_udp > 0, "nothing went by UDP: {stats:?}");
}
