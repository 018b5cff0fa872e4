//! A `[[link_faults]]` rule for the data lane loses data messages and never the token, on
//! both paths token-ring data travels: one UDP datagram to each member (the loss rolled
//! where the driver sends) and IP multicast (rolled where each member receives). Three
//! token-ring members on loopback, a third of every data message lost on every link: the
//! ring repairs it by retransmission (seed 002 §III-B), delivers one sequence, and never
//! loses its token, so it never gathers because of one. Nothing here asserts on timing: waits are
//! generous bounds on conditions.

mod runtime_support;

use abcast_core::NodeId;
use abcast_core::codec::Lane;
use abcast_core::config::StartInfo;
use abcast_core::token::{TokenConfig, TokenRing};
use abcast_runtime::transport::Unicast;
use abcast_runtime::{Driver, LinkFault, MulticastConfig, TransportConfig, TransportStats};
use runtime_support::*;
use std::net::SocketAddrV4;

const MEMBERS: usize = 3;
const VALUES_PER_NODE: u64 = 300;
const LOSS_PPM: u32 = 300_000;

fn ids() -> Vec<NodeId> {
    (0..MEMBERS as u32).map(NodeId).collect()
}

/// The control lane's port offset for attempt `k`: drawn per process and attempt, so a
/// port taken by anything else makes the next attempt use another.
fn control_offset(k: u16) -> u16 {
    1000 + (std::process::id() % 97) as u16 * 40 + k
}

fn transport(multicast: Option<SocketAddrV4>, offset: u16) -> TransportConfig {
    TransportConfig {
        unicast: Unicast::Udp,
        control_port_offset: Some(offset),
        multicast: multicast.map(MulticastConfig::new),
        link_faults: vec![LinkFault::everywhere(0, LOSS_PPM).on_lane(Lane::Data)],
        ..TransportConfig::default()
    }
}

struct Running {
    nodes: Vec<RunningNode<TokenRing>>,
}

/// Starts the ring with every node's load waiting for the whole ring (values proposed in a
/// smaller first ring would be delivered there alone, EVS). Retries with another control
/// port offset when a token socket's port is taken.
fn start_ring(multicast: Option<SocketAddrV4>, tweak: fn(&mut TransportConfig)) -> Running {
    for attempt in 0..20 {
        let mut t = transport(multicast, control_offset(attempt));
        tweak(&mut t);
        let specs = local_specs(MEMBERS, t, false, |_, _, a| a);
        let mut drivers = Vec::new();
        for (cfg, listeners) in specs {
            let me = cfg.me;
            let ring = TokenRing::new(TokenConfig::new(ids()), me, StartInfo::FRESH).unwrap();
            match Driver::new(cfg, ring, listeners) {
                Ok(d) => drivers.push(d),
                Err(_) => break,
            }
        }
        if drivers.len() < MEMBERS {
            continue;
        }
        let nodes = drivers
            .into_iter()
            .map(|mut driver| {
                driver.start_load(load_of(VALUES_PER_NODE, 100, 64).unwrap());
                driver.load_waits_for_view(MEMBERS);
                spawn(driver)
            })
            .collect();
        return Running { nodes };
    }
    panic!("no free control ports after 20 attempts");
}

/// Runs the ring to one sequence of every value; returns each member's counters and
/// token-ring statistics.
fn run(multicast: Option<SocketAddrV4>) -> Vec<(TransportStats, abcast_core::token::TokenStats)> {
    run_with(multicast, |_| {})
}

fn run_with(
    multicast: Option<SocketAddrV4>,
    tweak: fn(&mut TransportConfig),
) -> Vec<(TransportStats, abcast_core::token::TokenStats)> {
    let ring = start_ring(multicast, tweak);
    let total = MEMBERS * VALUES_PER_NODE as usize;
    assert!(
        wait_until(PATIENCE, || all_delivered(&ring.nodes, total)),
        "not all values delivered in time: {:?}",
        ring.nodes
            .iter()
            .map(|n| n.recorder.delivered_count())
            .collect::<Vec<_>>()
    );
    assert_agreement(&ring.nodes, total);
    ring.nodes
        .into_iter()
        .map(|n| {
            let d = n.stop();
            (d.transport_stats(), d.protocol().stats())
        })
        .collect()
}

/// The token ring never lost its token (the loss hit data only: a lost token would have
/// started a gather), and it asked for and answered retransmissions of what was lost.
/// (The first ring may still form in more than one step: joins travel on the data lane.)
fn assert_token_never_lost(stats: &[(TransportStats, abcast_core::token::TokenStats)]) {
    for (t, s) in stats {
        assert_eq!(s.token_losses, 0, "a token was lost: {s:?} {t:?}");
        assert!(s.tokens_taken > 0);
    }
    let asked: u64 = stats.iter().map(|(_, s)| s.retransmissions_asked).sum();
    let answered: u64 = stats.iter().map(|(_, s)| s.retransmissions_sent).sum();
    assert!(asked > 0 && answered > 0, "nothing was repaired: {stats:?}");
}

#[test]
fn data_lane_loss_on_unicast_datagrams_spares_the_token() {
    let stats = run(None);
    let lost: u64 = stats.iter().map(|(t, _)| t.frames_lost).sum();
    assert!(lost > 0, "the injected loss dropped nothing: {stats:?}");
    let control: u64 = stats.iter().map(|(t, _)| t.sends_by_control).sum();
    assert!(control > 0, "no token went on its own socket");
    assert_token_never_lost(&stats);
}

#[test]
fn data_lane_loss_on_ip_multicast_is_rolled_on_receipt_and_spares_the_token() {
    let port = 31_000 + (std::process::id() % 500) as u16 * 8 + 7;
    let group = SocketAddrV4::new([239, 255, 77, 1].into(), port);
    let stats = run(Some(group));
    let lost: u64 = stats.iter().map(|(t, _)| t.multicast.datagrams_lost).sum();
    let sent: u64 = stats.iter().map(|(t, _)| t.multicast.datagrams_sent).sum();
    assert!(sent > 0, "no data went by multicast: {stats:?}");
    assert!(lost > 0, "the injected loss dropped nothing: {stats:?}");
    assert_token_never_lost(&stats);
}

/// With `busy_poll_us = 0` (the loop sleeps in the kernel at once, documented as "0 =
/// never" spin) the loop polls again every iteration: it once kept the previous poll's
/// events when it did not spin, handled them again and again without polling, and a token
/// ring never formed (its nodes sent joins and read nothing, at full CPU).
#[test]
fn a_loop_that_never_busy_polls_still_reads_its_sockets() {
    let stats = run_with(None, |t| {
        t.busy_poll_us = 0;
        t.link_faults.clear();
    });
    for (t, s) in &stats {
        assert!(s.tokens_taken > 0, "{s:?} {t:?}");
        assert!(t.unicast.datagrams_received > 0, "{t:?}");
    }
}
