//! The simulator and the runtime carry a protocol's outbox out through one function
//! (`abcast_core::carry_out`), so an application sees the same thing under both: here the
//! toy sequencer, which reports a configuration change before every fourth instance, runs
//! in the simulator and on a real runtime node (sockets, event loop, load generator), and
//! an application records what it saw in each. The two records must be the same
//! sequence: deliveries in instance order, each configuration change at its place.

mod runtime_support;

use abcast_core::config::StartInfo;
use abcast_core::{ConfigChange, Delivery, Micros, NodeId};
use abcast_runtime::{Application, Hooks, TransportConfig};
use abcast_sim::toy::{Toy, ToyConfig};
use abcast_sim::{FaultMix, Observer, SimConfig};
use bytes::Bytes;
use runtime_support::*;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the application saw: `deliver N` per delivery, `config K` per change.
#[derive(Clone, Default)]
struct Seen(Arc<Mutex<Vec<String>>>);

impl Seen {
    fn first(&self, n: usize) -> Vec<String> {
        self.0.lock().unwrap().iter().take(n).cloned().collect()
    }
    fn len(&self) -> usize {
        self.0.lock().unwrap().len()
    }
}

impl Application for Seen {
    fn deliver(&mut self, _now: Micros, d: &Delivery, _results: &mut Vec<Bytes>) {
        self.0
            .lock()
            .unwrap()
            .push(format!("deliver {}", d.instance));
    }
    fn config_changed(&mut self, _now: Micros, c: &ConfigChange) {
        self.0
            .lock()
            .unwrap()
            .push(format!("config {}", c.config.id));
    }
}

impl Hooks for Seen {}

/// Entries compared: 40 instances and their 9 configuration changes.
const ENTRIES: usize = 49;

fn toy_config() -> ToyConfig {
    let mut toy = ToyConfig::new(&[NodeId(0)]);
    toy.config_every = 4;
    toy
}

fn seen_in_the_simulator() -> Vec<String> {
    let seen = Seen::default();
    let mut cfg = SimConfig::new(1, 3, FaultMix::None);
    let shared = seen.clone();
    cfg.observer = Some(Observer(Arc::new(move |_id| Box::new(shared.clone()))));
    let toy = toy_config();
    abcast_sim::run(&cfg, &move |id, start| Toy::new(toy.clone(), id, start))
        .unwrap_or_else(|v| panic!("{}", v.headline()));
    assert!(
        seen.len() >= ENTRIES,
        "the simulated run delivered too little"
    );
    seen.first(ENTRIES)
}

fn seen_on_the_runtime() -> Vec<String> {
    let seen = Seen::default();
    let (cfg, listeners) = local_specs(1, TransportConfig::default(), false, |_, _, a| a)
        .pop()
        .unwrap();
    let protocol = Toy::new(toy_config(), NodeId(0), StartInfo::FRESH);
    let mut driver = abcast_runtime::Driver::new(cfg, protocol, listeners).unwrap();
    driver.start_load(load_of(100_000, 16, 64).unwrap());
    let mut app = seen.clone();
    let watch = seen.clone();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    driver
        .run(&mut app, |_| {
            watch.len() >= ENTRIES || std::time::Instant::now() > deadline
        })
        .unwrap();
    let status = abcast_core::Protocol::status(driver.protocol());
    assert!(
        seen.len() >= ENTRIES,
        "the runtime node delivered too little: {:?}, {status:?}",
        seen.first(ENTRIES)
    );
    seen.first(ENTRIES)
}

#[test]
fn the_simulator_and_the_runtime_hand_the_application_the_same_sequence() {
    let sim = seen_in_the_simulator();
    let rt = seen_on_the_runtime();
    assert_eq!(sim, rt, "simulator (left) and runtime (right) disagree");
    assert_eq!(sim.iter().filter(|s| s.starts_with("config")).count(), 9);
    assert_eq!(sim[4], "config 1", "the change comes before instance 5");
    assert_eq!(sim[5], "deliver 5");
}
