//! The one carry-out: how a driver turns a protocol's [`Outbox`] into effects, in the
//! contract's order (see `protocol.rs`). The simulator and the runtime both call
//! [`carry_out`] with a [`Carrier`] of their own (network or sockets, checkers or clients),
//! so they cannot disagree on what reaches the application, or in which order.
//!
//! The order, for one outbox whose storage writes the caller already made durable:
//!
//! 1. the first `multicasts_first` multicasts, `sends`, then the other multicasts (a
//!    multicast reaches every member, this node included);
//! 2. the delivered sequence: each delivery, preceded by the positioned outputs whose
//!    `position` is at most its index, in this order at one position: installs,
//!    configuration changes, subscriptions, skips; the positioned outputs after the last
//!    delivery follow it in the same order;
//! 3. acknowledgements, then read states, then events.
//!
//! The application (through [`Carrier::app`]) sees deliveries, installs, skips and
//! configuration changes; the carrier hears of each after the application (for the
//! simulator's checkers, the runtime's clients and subscribers).

use crate::app::Application;
use crate::event::Event;
use crate::protocol::{
    Ack, ConfigChange, Delivery, Install, Outbox, ReadState, Skip, Subscription,
};
use crate::types::{Micros, NodeId};
use bytes::Bytes;

/// What a driver does with each effect (see the module comment for the order).
pub trait Carrier<M> {
    type App: Application + ?Sized;
    type Error;

    /// The application of this node.
    fn app(&mut self) -> &mut Self::App;

    /// One unicast message; per destination in outbox order.
    fn send(&mut self, to: NodeId, msg: M);

    /// One message for every member of the protocol instance's group, this node included
    /// (the contract's loopback: IP multicast with loopback on, or an in-process copy).
    fn multicast(&mut self, msg: M);

    /// Every message of the outbox has been handed over (`send`, `multicast`), before its
    /// deliveries are: a carrier that queues messages may write them now, so that they do
    /// not wait for the application (the token ring's post-token data, seed 002 §III-B3).
    fn handed_over(&mut self) {}

    /// The application took `d`; `results` are its per-value results (empty for none).
    fn delivered(
        &mut self,
        now: Micros,
        d: &Delivery,
        results: &[Bytes],
    ) -> Result<(), Self::Error>;

    /// The application installed `install.snapshot`; the driver persists it.
    fn installed(&mut self, now: Micros, install: &Install) -> Result<(), Self::Error>;

    /// The application refused `install` (`why`): the node must stop.
    fn install_refused(&mut self, now: Micros, install: &Install, why: String) -> Self::Error;

    /// The learner passed over `skip` (the application heard it first).
    fn skipped(&mut self, now: Micros, skip: &Skip) -> Result<(), Self::Error>;

    /// The learner starts or stops delivering a group.
    fn subscription(&mut self, now: Micros, s: &Subscription) -> Result<(), Self::Error> {
        let _ = (now, s);
        Ok(())
    }

    /// The configuration changed (the application heard it first).
    fn config_changed(&mut self, now: Micros, c: &ConfigChange) -> Result<(), Self::Error> {
        let _ = (now, c);
        Ok(())
    }

    /// Some of this node's own values are decided.
    fn acked(&mut self, now: Micros, a: &Ack) -> Result<(), Self::Error>;

    /// A read barrier was confirmed.
    fn read(&mut self, now: Micros, r: &ReadState) -> Result<(), Self::Error> {
        let _ = (now, r);
        Ok(())
    }

    /// A control-plane event (typed; `Display` gives its log line).
    fn event(&mut self, now: Micros, event: &Event);
}

/// Carries `out` out through `carrier`, in the contract's order, and leaves `out` empty
/// (capacity kept). The caller has made the storage writes behind `out` durable and
/// cleared `needs_sync` (asserted: a message that depends on a write must not leave
/// before it is durable).
pub fn carry_out<M, C: Carrier<M>>(
    now: Micros,
    out: &mut Outbox<M>,
    carrier: &mut C,
) -> Result<(), C::Error> {
    assert!(
        !out.needs_sync,
        "carry_out: an outbox that needs a sync must be made durable before it is carried out"
    );
    let first = std::mem::take(&mut out.multicasts_first).min(out.multicasts.len());
    let mut multicasts = out.multicasts.drain(..);
    for msg in multicasts.by_ref().take(first) {
        carrier.multicast(msg);
    }
    for (to, msg) in out.sends.drain(..) {
        carrier.send(to, msg);
    }
    for msg in multicasts {
        carrier.multicast(msg);
    }
    carrier.handed_over();
    let r = carry_sequence(now, out, carrier);
    if r.is_ok() {
        for a in &out.acks {
            carrier.acked(now, a)?;
        }
        for r in &out.reads {
            carrier.read(now, r)?;
        }
        for e in &out.events {
            carrier.event(now, e);
        }
    }
    out.clear();
    r
}

/// Step 2 of [`carry_out`]: the deliveries with the positioned outputs among them.
fn carry_sequence<M, C: Carrier<M>>(
    now: Micros,
    out: &Outbox<M>,
    carrier: &mut C,
) -> Result<(), C::Error> {
    let (mut inst, mut conf, mut subs, mut skips) = (0, 0, 0, 0);
    let mut results: Vec<Bytes> = Vec::new();
    // `n == deliveries.len()` is the tail: what comes after the last delivery.
    for n in 0..=out.deliveries.len() {
        while let Some(i) = out.installs.get(inst).filter(|i| i.position <= n) {
            inst += 1;
            if let Err(why) = carrier.app().install(now, &i.snapshot) {
                return Err(carrier.install_refused(now, i, why));
            }
            carrier.installed(now, i)?;
        }
        while let Some(c) = out.config_changes.get(conf).filter(|c| c.position <= n) {
            conf += 1;
            carrier.app().config_changed(now, c);
            carrier.config_changed(now, c)?;
        }
        while let Some(s) = out.subscriptions.get(subs).filter(|s| s.position <= n) {
            subs += 1;
            carrier.subscription(now, s)?;
        }
        // After the subscriptions of the same position: a Multi-Ring learner that skips a
        // ring stops following it in the same step.
        while let Some(s) = out.skips.get(skips).filter(|s| s.position <= n) {
            skips += 1;
            carrier.app().skipped(now, s);
            carrier.skipped(now, s)?;
        }
        let Some(d) = out.deliveries.get(n) else {
            break;
        };
        results.clear();
        carrier.app().deliver(now, d, &mut results);
        carrier.delivered(now, d, &results)?;
    }
    // Positions past the end are the tail's; the loops above took every one.
    assert!(
        inst == out.installs.len()
            && conf == out.config_changes.len()
            && subs == out.subscriptions.len()
            && skips == out.skips.len(),
        "carry_out: positioned outputs out of position order"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Configuration, Member, Roles};
    use crate::protocol::{ConfigKind, Snapshot};
    use crate::types::{Batch, BatchKey, GroupId, ValueId};

    /// Records what the application and the carrier saw, in order.
    #[derive(Default)]
    struct Rec {
        seen: Vec<String>,
        refuse_install: bool,
    }

    impl Application for Rec {
        fn deliver(&mut self, _now: Micros, d: &Delivery, results: &mut Vec<Bytes>) {
            self.seen.push(format!("app deliver {}", d.instance));
            results.push(Bytes::from(format!("r{}", d.instance)));
        }
        fn install(&mut self, _now: Micros, s: &Snapshot) -> Result<(), String> {
            self.seen.push(format!("app install {}", s.upto));
            if self.refuse_install {
                Err("no".into())
            } else {
                Ok(())
            }
        }
        fn skipped(&mut self, _now: Micros, s: &Skip) {
            self.seen.push(format!("app skip {}..{}", s.from, s.to));
        }
        fn config_changed(&mut self, _now: Micros, c: &ConfigChange) {
            self.seen.push(format!("app config {}", c.config.id));
        }
    }

    impl Carrier<u32> for Rec {
        type App = Rec;
        type Error = String;
        fn app(&mut self) -> &mut Rec {
            self
        }
        fn send(&mut self, to: NodeId, msg: u32) {
            self.seen.push(format!("send {msg} to {}", to.0));
        }
        fn multicast(&mut self, msg: u32) {
            self.seen.push(format!("multicast {msg}"));
        }
        fn handed_over(&mut self) {
            self.seen.push("handed over".to_string());
        }
        fn delivered(&mut self, _: Micros, d: &Delivery, r: &[Bytes]) -> Result<(), String> {
            self.seen.push(format!("delivered {} {:?}", d.instance, r));
            Ok(())
        }
        fn installed(&mut self, _: Micros, i: &Install) -> Result<(), String> {
            self.seen.push(format!("installed {}", i.snapshot.upto));
            Ok(())
        }
        fn install_refused(&mut self, _: Micros, i: &Install, why: String) -> String {
            format!("refused {}: {why}", i.snapshot.upto)
        }
        fn skipped(&mut self, _: Micros, s: &Skip) -> Result<(), String> {
            self.seen.push(format!("skipped {}", s.from));
            Ok(())
        }
        fn subscription(&mut self, _: Micros, s: &Subscription) -> Result<(), String> {
            self.seen.push(format!("subscription {}", s.group.0));
            Ok(())
        }
        fn acked(&mut self, _: Micros, a: &Ack) -> Result<(), String> {
            self.seen.push(format!("ack {}", a.count));
            Ok(())
        }
        fn read(&mut self, _: Micros, r: &ReadState) -> Result<(), String> {
            self.seen.push(format!("read {} {}", r.id, r.upto));
            Ok(())
        }
        fn event(&mut self, _: Micros, event: &Event) {
            self.seen.push(format!("event {event}"));
        }
    }

    fn outbox() -> Outbox<u32> {
        let mut out = Outbox::new();
        let batch = Batch::single(
            ValueId {
                node: NodeId(1),
                seq: 1,
            },
            Bytes::from_static(b"x"),
        );
        for i in [10, 11] {
            out.deliveries.push(Delivery::new(i, batch.clone()));
        }
        out.send(NodeId(2), 7);
        out.multicasts.push(8);
        out.installs.push(Install {
            snapshot: Snapshot {
                upto: 9,
                protocol: Bytes::new(),
                app: Bytes::new(),
            },
            position: 0,
        });
        out.config_changes.push(ConfigChange {
            kind: ConfigKind::Regular,
            config: Configuration {
                id: 3,
                members: vec![Member {
                    id: NodeId(1),
                    roles: Roles::PAL,
                }],
            },
            position: 1,
        });
        out.subscriptions.push(Subscription {
            group: GroupId(4),
            subscribed: true,
            from_start: false,
            position: 2,
        });
        out.skips.push(Skip {
            group: GroupId(0),
            from: 12,
            to: 20,
            position: 2,
        });
        out.acks.push(Ack {
            key: BatchKey {
                origin: NodeId(1),
                first_seq: 1,
            },
            count: 1,
        });
        out.reads.push(ReadState { id: 5, upto: 11 });
        out.events.push(Event::Repaired { upto: 4 });
        out
    }

    #[test]
    fn an_outbox_is_carried_out_in_the_contracts_order_with_positions_kept() {
        let mut out = outbox();
        let mut rec = Rec::default();
        carry_out(0, &mut out, &mut rec).expect("carried out");
        assert_eq!(
            rec.seen,
            [
                "send 7 to 2",
                "multicast 8",
                "handed over",
                "app install 9",
                "installed 9",
                "app deliver 10",
                "delivered 10 [b\"r10\"]",
                "app config 3",
                "app deliver 11",
                "delivered 11 [b\"r11\"]",
                "subscription 4",
                "app skip 12..20",
                "skipped 12",
                "ack 1",
                "read 5 11",
                "event acceptor repaired: knows every decision up to 4",
            ]
        );
        assert!(out.is_empty(), "the outbox is left empty");
    }

    #[test]
    fn an_install_the_application_refuses_stops_the_carry_out_before_any_delivery() {
        let mut out = outbox();
        let mut rec = Rec {
            refuse_install: true,
            ..Rec::default()
        };
        let e = carry_out(0, &mut out, &mut rec).expect_err("refused");
        assert_eq!(e, "refused 9: no");
        assert!(!rec.seen.iter().any(|s| s.starts_with("app deliver")));
        assert!(out.is_empty());
    }

    #[test]
    #[should_panic(expected = "made durable before")]
    fn an_outbox_that_needs_a_sync_is_refused() {
        let mut out = outbox();
        out.needs_sync = true;
        let _ = carry_out(0, &mut out, &mut Rec::default());
    }
}
