//! A handle into a running node's event loop: the embedding API, and what any front end
//! other than the client port (a gRPC service later) goes through.
//!
//! [`start`] runs the driver on a thread of its own and returns a [`NodeHandle`] with a
//! handful of verbs, in the manner of OmniPaxos (`append`, `read_decided_suffix`,
//! `reconfigure`) and openraft (`client_write`, `ensure_linearizable`, `change_membership`,
//! `shutdown`), but blocking with timeouts instead of async:
//!
//! | verb | answer |
//! | --- | --- |
//! | `propose(payload)` | a [`Ticket`] with the value's id; `ticket.wait(t)` returns once this node delivered the value, with the application's result for it (`Application::deliver`'s `results[i]`); `ticket.wait_decided(t)` once it is decided (a node without the learner role delivers nothing: use this there) |
//! | `subscribe(from, capacity)` | a [`DeliveryStream`] of deliveries from instance `from`, replayed from the node's history where it holds them, with a [`Gap`] marker wherever it does not (never a silent jump) |
//! | `read_barrier(t)` | a [`ReadPoint`]: once this node's application has applied up to `upto`, a read of its state is linearizable. `Protocol::read_index` where the protocol has one (Sequence Paxos and Raft, at the leader); where it answers `Unsupported` (the ring protocols) the read is ordered through the log: an **empty value** is proposed as a marker and awaited, so applications see empty values delivered and must treat them as no-ops |
//! | `reconfigure(config)` | `Protocol::reconfigure`'s answer: `Ok` once the change is under way (Sequence Paxos and Raft, at the leader; `NotLeader { hint }` elsewhere), `Unsupported` from the protocols without reconfiguration; the change is in effect once `status()` shows it |
//! | `status()` | the protocol's status (leader, configuration, a change pending, followers' progress at a leader) and the transport's counters |
//! | `shutdown()` | stops the loop, joins the thread, returns the application and the last figures, or the error that stopped the node |
//!
//! Bounded everywhere: the command channel holds `COMMANDS_MAX` commands (a full one answers
//! [`HandleError::Busy`]); the loop takes at most that many values awaited by tickets, and a
//! full proposer window answers `Busy` too; a subscriber's stream holds `capacity` events,
//! and one that is not read is cut off with [`EndReason::TooSlow`] after what it holds.

use crate::driver::{Driver, DriverError, Listeners, TransportStats};
use crate::history::Gap;
use crate::{DriverConfig, Hooks};
use abcast_core::config::Configuration;
use abcast_core::protocol::ReconfigureError;
use abcast_core::{Delivery, Instance, NodeId, ProposeError, Protocol, Status, ValueId};
use bytes::Bytes;
use std::collections::VecDeque;
use std::fmt;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Commands waiting for the loop, at most.
pub const COMMANDS_MAX: usize = 1024;
/// Most events one subscriber's stream holds.
pub const STREAM_CAPACITY_MAX: usize = 1 << 16;
/// How long a verb waits for the loop to answer (the loop answers within one iteration).
pub const LOOP_ANSWER_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a verb did not succeed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HandleError {
    /// A bound is reached (commands, values awaited, the proposer's window): retry later.
    Busy,
    /// No answer within the time given.
    Timeout,
    /// The protocol refused the input.
    Refused(ProposeError),
    /// `reconfigure`: the protocol's answer.
    Reconfigure(ReconfigureError),
    /// The stream, ticket or node ended (see the reason).
    Ended(EndReason),
    /// An argument the handle rejects before the loop sees it.
    Invalid(String),
}

impl fmt::Display for HandleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HandleError::Busy => write!(f, "busy: a bound is reached, retry later"),
            HandleError::Timeout => write!(f, "timed out"),
            HandleError::Refused(e) => write!(f, "refused: {e}"),
            HandleError::Reconfigure(e) => write!(f, "{e}"),
            HandleError::Ended(r) => write!(f, "ended: {r}"),
            HandleError::Invalid(s) => write!(f, "invalid argument: {s}"),
        }
    }
}

impl std::error::Error for HandleError {}

/// Why a stream (or a ticket) ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EndReason {
    /// The subscriber did not read: its `capacity` events were waiting when the next one
    /// came. Resubscribe from the instance after the last one read.
    TooSlow { capacity: usize },
    /// The node stopped (shutdown, or the error that stopped it).
    NodeStopped(String),
}

impl fmt::Display for EndReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EndReason::TooSlow { capacity } => write!(
                f,
                "subscriber too slow: {capacity} events were waiting unread; resubscribe from \
                 the next instance"
            ),
            EndReason::NodeStopped(why) => write!(f, "node stopped: {why}"),
        }
    }
}

// ----- a bounded mailbox that can be closed with a reason, even when full ---------------

struct MailState<T> {
    queue: VecDeque<T>,
    capacity: usize,
    end: Option<EndReason>,
    receiver_gone: bool,
}

struct MailInner<T> {
    state: Mutex<MailState<T>>,
    ready: Condvar,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Nothing panics while holding the lock; a poisoned one still holds consistent data.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The loop's side of a mailbox. Dropping it ends the mailbox (`NodeStopped`).
pub(crate) struct MailTx<T> {
    inner: Arc<MailInner<T>>,
}

/// The caller's side.
pub(crate) struct MailRx<T> {
    inner: Arc<MailInner<T>>,
    /// Wakes the loop when the receiver frees room in a full mailbox (streams replay in
    /// steps as room frees).
    waker: Option<Arc<mio::Waker>>,
}

#[derive(Debug, PartialEq, Eq)]
pub(crate) enum PushError {
    Full,
    Gone,
}

pub(crate) fn mailbox<T>(
    capacity: usize,
    waker: Option<Arc<mio::Waker>>,
) -> (MailTx<T>, MailRx<T>) {
    let inner = Arc::new(MailInner {
        state: Mutex::new(MailState {
            queue: VecDeque::new(),
            capacity: capacity.max(1),
            end: None,
            receiver_gone: false,
        }),
        ready: Condvar::new(),
    });
    (
        MailTx {
            inner: Arc::clone(&inner),
        },
        MailRx { inner, waker },
    )
}

impl<T> MailTx<T> {
    pub(crate) fn push(&self, v: T) -> Result<(), PushError> {
        let mut s = lock(&self.inner.state);
        if s.receiver_gone {
            return Err(PushError::Gone);
        }
        if s.queue.len() >= s.capacity {
            return Err(PushError::Full);
        }
        s.queue.push_back(v);
        drop(s);
        self.inner.ready.notify_one();
        Ok(())
    }

    /// Room for this many more.
    pub(crate) fn room(&self) -> usize {
        let s = lock(&self.inner.state);
        if s.receiver_gone {
            return 0;
        }
        s.capacity.saturating_sub(s.queue.len())
    }

    pub(crate) fn capacity(&self) -> usize {
        lock(&self.inner.state).capacity
    }

    pub(crate) fn is_gone(&self) -> bool {
        lock(&self.inner.state).receiver_gone
    }

    /// Ends the mailbox: the receiver gets what it holds, then `reason`.
    pub(crate) fn close(&self, reason: EndReason) {
        let mut s = lock(&self.inner.state);
        if s.end.is_none() {
            s.end = Some(reason);
        }
        drop(s);
        self.inner.ready.notify_all();
    }
}

impl<T> Drop for MailTx<T> {
    fn drop(&mut self) {
        self.close(EndReason::NodeStopped("the event loop ended".into()));
    }
}

impl<T> MailRx<T> {
    /// The next value, waiting at most `timeout`.
    pub(crate) fn recv(&self, timeout: Duration) -> Result<T, HandleError> {
        let deadline = Instant::now() + timeout;
        let mut s = lock(&self.inner.state);
        loop {
            if let Some(v) = s.queue.pop_front() {
                let was_full = s.queue.len() + 1 >= s.capacity;
                drop(s);
                if was_full && let Some(w) = &self.waker {
                    // The loop resumes a paused replay; a failed wake only delays it until
                    // the loop's next poll timeout.
                    let _ = w.wake();
                }
                return Ok(v);
            }
            if let Some(r) = &s.end {
                return Err(HandleError::Ended(r.clone()));
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(HandleError::Timeout);
            }
            s = self
                .inner
                .ready
                .wait_timeout(s, deadline - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }
}

impl<T> Drop for MailRx<T> {
    fn drop(&mut self) {
        lock(&self.inner.state).receiver_gone = true;
    }
}

// ----- commands -----------------------------------------------------------------------

/// What a ticket hears from the loop.
pub(crate) enum TicketEvent {
    Proposed(Result<ValueId, HandleError>),
    Decided,
    Applied {
        instance: Instance,
        result: Option<Bytes>,
    },
}

/// One event of a subscription.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StreamEvent {
    Delivered(Delivery),
    /// Instances `[from, to)` the stream does not carry, and why (see [`Gap`]).
    Gap(Gap),
}

pub(crate) enum ReadAnswer {
    Ready(Instance),
    Unsupported,
    Refused(HandleError),
}

/// Figures of a running node.
#[derive(Clone, Debug)]
pub struct NodeStatus {
    pub protocol: Status,
    pub transport: TransportStats,
    /// Every instance up to here was delivered (or covered by a gap) at this node.
    pub delivered_upto: Instance,
}

pub(crate) enum Command {
    Propose {
        payload: Bytes,
        ticket: MailTx<TicketEvent>,
    },
    Subscribe {
        from: Instance,
        stream: MailTx<StreamEvent>,
    },
    ReadBarrier {
        reply: MailTx<ReadAnswer>,
    },
    Reconfigure {
        config: Configuration,
        reply: MailTx<Result<(), ReconfigureError>>,
    },
    Status {
        reply: MailTx<NodeStatus>,
    },
    AddPeer {
        id: NodeId,
        addr: SocketAddr,
        reply: MailTx<Result<(), String>>,
    },
    RemovePeer {
        id: NodeId,
        reply: MailTx<bool>,
    },
}

/// The sending side of the loop's command channel (`Driver::command_channel`).
#[derive(Clone)]
pub struct Commands {
    pub(crate) tx: SyncSender<Command>,
    pub(crate) waker: Arc<mio::Waker>,
}

pub(crate) fn command_channel(waker: Arc<mio::Waker>) -> (Commands, Receiver<Command>) {
    let (tx, rx) = mpsc::sync_channel(COMMANDS_MAX);
    (Commands { tx, waker }, rx)
}

impl Commands {
    fn send(&self, c: Command) -> Result<(), HandleError> {
        match self.tx.try_send(c) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => return Err(HandleError::Busy),
            Err(TrySendError::Disconnected(_)) => {
                return Err(HandleError::Ended(EndReason::NodeStopped(
                    "the event loop ended".into(),
                )));
            }
        }
        // A failed wake leaves the command for the loop's next poll timeout (50 ms).
        let _ = self.waker.wake();
        Ok(())
    }
}

// ----- the handle ---------------------------------------------------------------------

/// A proposed value: its id, and the way to await its outcome.
pub struct Ticket {
    pub id: ValueId,
    rx: MailRx<TicketEvent>,
    /// The outcome, when `wait_decided` read it first (a learner may deliver a value in
    /// the same step that acknowledges it, or before).
    applied: Mutex<Option<Applied>>,
}

/// A value this node delivered: where, and the application's result for it (`None` when
/// the application gives none).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Applied {
    pub id: ValueId,
    pub instance: Instance,
    pub result: Option<Bytes>,
}

impl Ticket {
    /// Waits until this node delivered the value to its application; returns its result.
    pub fn wait(&self, timeout: Duration) -> Result<Applied, HandleError> {
        if let Some(a) = lock(&self.applied).clone() {
            return Ok(a);
        }
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.rx.recv(left)? {
                TicketEvent::Applied { instance, result } => {
                    return Ok(Applied {
                        id: self.id,
                        instance,
                        result,
                    });
                }
                TicketEvent::Decided | TicketEvent::Proposed(_) => continue,
            }
        }
    }

    /// Waits until the value is decided (a quorum accepted it), delivered here or not.
    pub fn wait_decided(&self, timeout: Duration) -> Result<(), HandleError> {
        if lock(&self.applied).is_some() {
            return Ok(());
        }
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.rx.recv(left)? {
                TicketEvent::Decided => return Ok(()),
                TicketEvent::Applied { instance, result } => {
                    *lock(&self.applied) = Some(Applied {
                        id: self.id,
                        instance,
                        result,
                    });
                    return Ok(());
                }
                TicketEvent::Proposed(_) => continue,
            }
        }
    }
}

/// A subscription's events, in instance order.
pub struct DeliveryStream {
    rx: MailRx<StreamEvent>,
}

impl DeliveryStream {
    /// The next event; `Err(Ended(reason))` once the stream ended and is drained.
    pub fn next(&self, timeout: Duration) -> Result<StreamEvent, HandleError> {
        self.rx.recv(timeout)
    }
}

/// The answer of `read_barrier`: reads of the application's state are linearizable once
/// it applied every instance up to `upto` (at the latest when the barrier returned, for
/// the log-ordered barrier, whose marker value is itself at `upto`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadPoint {
    pub upto: Instance,
}

/// What `shutdown` returns: the application, and the node's last figures.
pub struct Stopped<A> {
    pub app: A,
    pub status: Status,
    pub transport: TransportStats,
}

/// A node's event loop running on its own thread (see the module comment).
pub struct NodeHandle<A> {
    me: NodeId,
    peer_addr: Option<SocketAddr>,
    client_addr: Option<SocketAddr>,
    commands: Commands,
    waker: Arc<mio::Waker>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Result<Stopped<A>, DriverError>>>,
}

/// Starts a node: builds the driver on the caller's thread (so configuration errors come
/// back here), then runs its loop on a thread named `abcast-node-<id>`.
pub fn start<P, A>(
    cfg: DriverConfig,
    listeners: Listeners,
    protocol: P,
    app: A,
) -> Result<NodeHandle<A>, DriverError>
where
    P: Protocol + Send + 'static,
    P::Message: Send,
    A: Hooks + Send + 'static,
{
    let me = cfg.me;
    let mut driver = Driver::new(cfg, protocol, listeners)?;
    let commands = driver.command_channel()?;
    let waker = Arc::clone(&commands.waker);
    let stop = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&stop);
    let peer_addr = driver.peer_addr().ok();
    let client_addr = driver.client_addr();
    let thread = std::thread::Builder::new()
        .name(format!("abcast-node-{}", me.0))
        .spawn(move || {
            let mut app = app;
            driver.run(&mut app, |_| flag.load(Ordering::Relaxed))?;
            Ok(Stopped {
                status: driver.protocol().status(),
                transport: driver.transport_stats(),
                app,
            })
        })
        .map_err(|source| DriverError::Io {
            what: "starting the node's thread",
            source,
        })?;
    Ok(NodeHandle {
        me,
        peer_addr,
        client_addr,
        commands,
        waker,
        stop,
        thread: Some(thread),
    })
}

impl<A> NodeHandle<A> {
    pub fn id(&self) -> NodeId {
        self.me
    }

    pub fn peer_addr(&self) -> Option<SocketAddr> {
        self.peer_addr
    }

    pub fn client_addr(&self) -> Option<SocketAddr> {
        self.client_addr
    }

    /// A clone of the command channel, for another front end on another thread.
    pub fn commands(&self) -> Commands {
        self.commands.clone()
    }

    /// Offers one value for total-order broadcast; returns once the protocol took it
    /// (`Busy` when the proposer's window or a bound is full: retry later).
    pub fn propose(&self, payload: Bytes) -> Result<Ticket, HandleError> {
        propose(&self.commands, payload)
    }

    /// Streams deliveries from instance `from` (at least 1): first what the node's
    /// history holds (a gap marker where it does not), then live. At most `capacity`
    /// events wait unread; past that the stream ends with `TooSlow`.
    pub fn subscribe(
        &self,
        from: Instance,
        capacity: usize,
    ) -> Result<DeliveryStream, HandleError> {
        if capacity == 0 || capacity > STREAM_CAPACITY_MAX {
            return Err(HandleError::Invalid(format!(
                "capacity {capacity}: between 1 and {STREAM_CAPACITY_MAX}"
            )));
        }
        let (tx, rx) = mailbox(capacity, Some(Arc::clone(&self.waker)));
        self.commands.send(Command::Subscribe {
            from: from.max(1),
            stream: tx,
        })?;
        Ok(DeliveryStream { rx })
    }

    /// A linearizable-read barrier (see the module comment: `Protocol::read_index`, or a
    /// marker value through the log where the protocol has none).
    pub fn read_barrier(&self, timeout: Duration) -> Result<ReadPoint, HandleError> {
        let (tx, rx) = mailbox(1, None);
        self.commands.send(Command::ReadBarrier { reply: tx })?;
        match rx.recv(timeout)? {
            ReadAnswer::Ready(upto) => Ok(ReadPoint { upto }),
            ReadAnswer::Refused(e) => Err(e),
            ReadAnswer::Unsupported => {
                // Ordered through the log: the empty marker value's own delivery is the
                // barrier. Everything decided before the barrier was asked is before it.
                let ticket = self.propose(Bytes::new())?;
                let applied = ticket.wait(timeout)?;
                Ok(ReadPoint {
                    upto: applied.instance,
                })
            }
        }
    }

    /// Asks the protocol to move to `config`; `Ok` means the change is under way (see
    /// `Protocol::reconfigure`); it is in effect once `status()` shows it as the
    /// configuration with no change pending. Protocols without reconfiguration answer
    /// `Unsupported`.
    pub fn reconfigure(&self, config: Configuration) -> Result<(), HandleError> {
        let (tx, rx) = mailbox(1, None);
        self.commands
            .send(Command::Reconfigure { config, reply: tx })?;
        rx.recv(LOOP_ANSWER_TIMEOUT)?
            .map_err(HandleError::Reconfigure)
    }

    /// Adds node `id` at `addr` to the transports' peer set, or moves it there
    /// (`Driver::add_peer`). The peer set is the address book, not the membership: a
    /// protocol that changes its configuration (`reconfigure`) needs the new members'
    /// addresses here first.
    pub fn add_peer(&self, id: NodeId, addr: SocketAddr) -> Result<(), HandleError> {
        let (tx, rx) = mailbox(1, None);
        self.commands.send(Command::AddPeer {
            id,
            addr,
            reply: tx,
        })?;
        rx.recv(LOOP_ANSWER_TIMEOUT)?.map_err(HandleError::Invalid)
    }

    /// Removes node `id` from the peer set (`Driver::remove_peer`): its links close and
    /// nothing more is sent to or accepted from it. False if it was not a peer.
    pub fn remove_peer(&self, id: NodeId) -> Result<bool, HandleError> {
        let (tx, rx) = mailbox(1, None);
        self.commands.send(Command::RemovePeer { id, reply: tx })?;
        rx.recv(LOOP_ANSWER_TIMEOUT)
    }

    pub fn status(&self) -> Result<NodeStatus, HandleError> {
        let (tx, rx) = mailbox(1, None);
        self.commands.send(Command::Status { reply: tx })?;
        rx.recv(LOOP_ANSWER_TIMEOUT)
    }

    /// Stops the loop (what it holds is carried out first), joins its thread, and returns
    /// the application with the last figures, or the error that stopped the node.
    pub fn shutdown(mut self) -> Result<Stopped<A>, DriverError> {
        self.stop_and_join().unwrap_or_else(|| {
            Err(DriverError::Io {
                what: "joining the node's thread",
                source: std::io::Error::other("already joined"),
            })
        })
    }

    fn stop_and_join(&mut self) -> Option<Result<Stopped<A>, DriverError>> {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.waker.wake();
        let t = self.thread.take()?;
        Some(t.join().unwrap_or_else(|_| {
            Err(DriverError::Io {
                what: "the node's thread panicked",
                source: std::io::Error::other("panic"),
            })
        }))
    }
}

impl<A> Drop for NodeHandle<A> {
    fn drop(&mut self) {
        // A handle dropped without `shutdown` still stops its node.
        let _ = self.stop_and_join();
    }
}

/// `propose` on any clone of the command channel.
pub fn propose(commands: &Commands, payload: Bytes) -> Result<Ticket, HandleError> {
    let (tx, rx) = mailbox(3, None);
    commands.send(Command::Propose {
        payload,
        ticket: tx,
    })?;
    match rx.recv(LOOP_ANSWER_TIMEOUT)? {
        TicketEvent::Proposed(Ok(id)) => Ok(Ticket {
            id,
            rx,
            applied: Mutex::new(None),
        }),
        TicketEvent::Proposed(Err(e)) => Err(e),
        // The loop answers `Proposed` first, always.
        TicketEvent::Decided | TicketEvent::Applied { .. } => Err(HandleError::Invalid(
            "the loop answered out of order".into(),
        )),
    }
}
