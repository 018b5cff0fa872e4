//! What a stream connection may read before the bytes arrive (issue 33, suspect 5).
//!
//! A frame header announces its body's length, and nothing about that number is true until
//! the bytes come. A reader that reserved the announced length let one 16-byte header make
//! the node reserve 65 MiB, and 1,024 client connections make it hold whatever strangers
//! chose to send. So a connection's reads follow three rules, the same on the client port
//! (`driver/conns.rs`, TCP, Unix sockets and the shared-memory rings alike) and on the peer
//! port (`tcp.rs`), where a stranger can connect too (peers prove no more than a cluster id
//! in their `Hello`):
//!
//! - **A largest body per kind**, checked at the header: the caller's `limit(kind)`. On the
//!   client port a proposal or a group multicast may carry a value of up to
//!   [`frame::MAX_BODY_BYTES`]; every other client frame (status, subscribe, follow, read,
//!   reconfigure, group join ...) at most [`CONTROL_BODY_MAX_BYTES`]. On the peer port, a
//!   connection that has not said `Hello` may send a `Hello` and nothing larger. A frame
//!   over its kind's limit closes the connection, counted, before its body is read.
//! - **A free allowance per connection**: a connection may hold up to `free` bytes of a
//!   frame it has not finished ([`CLIENT_FREE_BYTES`] on the client port: every control
//!   frame fits, and a small proposal), without asking anyone. Reads are sized so that
//!   what they bring can never exceed the allowance plus what the budget granted: the
//!   buffer grows as bytes arrive, starting at [`READ_CHUNK_MIN_BYTES`] and doubling while
//!   reads fill it, never to an announced length.
//! - **A budget per port for larger frames** ([`ReadBudget`]): a frame longer than the
//!   allowance is read only once the port's budget holds its whole length for it (its
//!   admission). Until then the connection is not read at all: TCP's flow control holds the
//!   sender, and the connection waits in arrival order for the budget. The bytes are given
//!   back when the frame is complete or its connection closes. A frame is admitted when it
//!   fits, or when no other frame is admitted, so one frame of any allowed length can
//!   always be read: a legitimate large proposal waits its turn but is never refused.
//! - **No squatting**: a stranger could announce large frames and send nothing, holding
//!   the budget. An admitted frame still incomplete after [`OVERDUE_GRACE_US`] plus
//!   [`OVERDUE_US_PER_MIB`] per MiB of its length, while another connection waits for the
//!   budget, is cut: its connection closes, counted (`read_overdue_closes`). A slow sender
//!   that blocks nobody is never cut.
//!
//! Memory held in partial frames, per port, is then at most connections × allowance +
//! budget (+ one frame when a single frame is larger than the budget), instead of
//! connections × 65 MiB. What Corosync does for the same problem: `qb_ipcs` caps each
//! client's request size (`max_msg_size`) and stops reading a client whose requests are
//! not served (flow control), which is this file's per-kind limit and waiting.

use crate::frame::{self, FrameError, HEADER_BYTES};
use abcast_core::Micros;
use bytes::BytesMut;
use mio::Token;
use std::collections::{HashMap, VecDeque};

/// The largest body of a client frame that carries no value (everything but `Propose` and
/// `GroupMulticast`): a reconfiguration of several thousand members fits.
pub const CONTROL_BODY_MAX_BYTES: usize = 64 << 10;
/// What a client connection may hold of an unfinished frame without the budget: a whole
/// control frame.
pub const CLIENT_FREE_BYTES: usize = HEADER_BYTES + CONTROL_BODY_MAX_BYTES;
/// A connection's first read; the size doubles while reads fill it.
pub const READ_CHUNK_MIN_BYTES: usize = 4 << 10;
/// An admitted frame is due after this, plus [`OVERDUE_US_PER_MIB`] per MiB of its length.
pub const OVERDUE_GRACE_US: Micros = 10_000_000;
/// The slowest sender of a large frame that is never cut while others wait: 1 MiB/s.
pub const OVERDUE_US_PER_MIB: Micros = 1_000_000;
/// [`crate::transport::TransportConfig::client_read_budget_bytes`] and
/// `peer_read_budget_bytes` by default: three frames of the largest size at once.
pub const READ_BUDGET_BYTES_DEFAULT: usize = 3 * (HEADER_BYTES + frame::MAX_BODY_BYTES);

/// An admitted frame: the bytes it holds of the budget, and when it is overdue.
#[derive(Clone, Copy, Debug)]
struct Admission {
    bytes: usize,
    due_us: Micros,
}

/// What [`ReadBudget::admit`] decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Admit {
    Admitted,
    /// Not now; `first` is true when the connection just joined the queue.
    Waits {
        first: bool,
    },
}

/// The budget of one port for frames longer than a connection's free allowance (see the
/// module comment): admitted frames by connection, and the connections waiting, in order.
#[derive(Debug)]
pub struct ReadBudget {
    limit_bytes: usize,
    held_bytes: usize,
    admitted: HashMap<Token, Admission>,
    waiting: VecDeque<Token>,
    /// Connections to read again: the head of the queue after the budget gave bytes back.
    woken: Vec<Token>,
}

impl ReadBudget {
    pub fn new(limit_bytes: usize) -> ReadBudget {
        ReadBudget {
            limit_bytes,
            held_bytes: 0,
            admitted: HashMap::new(),
            waiting: VecDeque::new(),
            woken: Vec::new(),
        }
    }

    /// Bytes of the budget held by admitted frames.
    pub fn held_bytes(&self) -> usize {
        self.held_bytes
    }

    /// Connections waiting for the budget.
    pub fn waiting(&self) -> usize {
        self.waiting.len()
    }

    fn is_admitted(&self, token: Token) -> bool {
        self.admitted.contains_key(&token)
    }

    /// Admits a frame of `bytes` for `token` if it fits (or nothing else is admitted) and
    /// no connection waits ahead of it; otherwise `token` waits in the queue.
    fn admit(&mut self, token: Token, bytes: usize, now: Micros) -> Admit {
        debug_assert!(!self.is_admitted(token));
        let first_in_line = self.waiting.front().is_none_or(|&t| t == token);
        let fits = self.admitted.is_empty()
            || self
                .held_bytes
                .checked_add(bytes)
                .is_some_and(|b| b <= self.limit_bytes);
        if first_in_line && fits {
            if self.waiting.front() == Some(&token) {
                self.waiting.pop_front();
                // The next in line may fit too.
                self.woken.extend(self.waiting.front().copied());
            }
            self.held_bytes += bytes;
            let mib = (bytes >> 20) as Micros + 1;
            let due_us = now
                .saturating_add(OVERDUE_GRACE_US)
                .saturating_add(mib.saturating_mul(OVERDUE_US_PER_MIB));
            self.admitted.insert(token, Admission { bytes, due_us });
            return Admit::Admitted;
        }
        let first = !self.waiting.contains(&token);
        if first {
            self.waiting.push_back(token);
        }
        Admit::Waits { first }
    }

    /// `token`'s admitted frame is complete: its bytes go back to the budget.
    fn release(&mut self, token: Token) {
        if let Some(a) = self.admitted.remove(&token) {
            self.held_bytes -= a.bytes;
            self.woken.extend(self.waiting.front().copied());
        }
    }

    /// Connection `token` closed: whatever it held or waited for is given up.
    pub fn forget(&mut self, token: Token) {
        self.release(token);
        if let Some(at) = self.waiting.iter().position(|&t| t == token) {
            self.waiting.remove(at);
            if at == 0 {
                self.woken.extend(self.waiting.front().copied());
            }
        }
    }

    /// Moves the connections to read again into `out`.
    pub fn take_woken(&mut self, out: &mut Vec<Token>) {
        out.append(&mut self.woken);
    }

    /// Connections whose admitted frame is overdue while another waits: the caller closes
    /// them (and calls [`ReadBudget::forget`]).
    pub fn overdue(&self, now: Micros) -> Vec<Token> {
        if self.waiting.is_empty() {
            return Vec::new();
        }
        let mut late: Vec<Token> = self
            .admitted
            .iter()
            .filter(|(_, a)| a.due_us <= now)
            .map(|(&t, _)| t)
            .collect();
        late.sort_unstable_by_key(|t| t.0);
        late
    }

    /// When the next admitted frame falls due, if any connection waits.
    pub fn next_due(&self) -> Option<Micros> {
        if self.waiting.is_empty() {
            return None;
        }
        self.admitted.values().map(|a| a.due_us).min()
    }
}

/// What a connection may do now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Plan {
    /// Read at most this many bytes (never 0).
    Read(usize),
    /// Do not read: the connection waits for the budget and is woken
    /// ([`ReadBudget::take_woken`]). `first`: it just started waiting (count it).
    Wait { first: bool },
    /// Close the connection: a frame longer than its kind may be.
    Refuse(String),
}

/// What a connection may hold (see the module comment).
#[derive(Clone, Copy, Debug)]
pub struct Allowance<F> {
    /// Bytes of an unfinished frame it holds without the budget.
    pub free_bytes: usize,
    /// Its largest single read.
    pub chunk_max_bytes: usize,
    /// The largest body a frame of each kind may announce.
    pub body_max: F,
}

/// One connection's side of the rules: its read size, which grows as bytes arrive.
#[derive(Clone, Copy, Debug)]
pub struct Intake {
    chunk_bytes: usize,
}

impl Default for Intake {
    fn default() -> Self {
        Intake::new()
    }
}

impl Intake {
    pub fn new() -> Intake {
        Intake {
            chunk_bytes: READ_CHUNK_MIN_BYTES,
        }
    }

    /// How much connection `token`, whose buffer holds `buf` (no complete frame at its
    /// front: the caller decoded those), may read now under `allow`.
    pub fn plan(
        &mut self,
        token: Token,
        buf: &[u8],
        allow: &Allowance<impl Fn(u8) -> usize>,
        budget: &mut ReadBudget,
        now: Micros,
    ) -> Plan {
        let (free, chunk_max) = (allow.free_bytes, allow.chunk_max_bytes);
        let room = match frame::peek_kind_and_len(buf) {
            None => free.saturating_sub(buf.len()),
            Some((kind, len)) => {
                let max = (allow.body_max)(kind);
                if len > max {
                    return Plan::Refuse(format!(
                        "frame of kind {kind} announces a body of {len} bytes, more than the \
                         {max} bytes its kind may carry"
                    ));
                }
                let whole = HEADER_BYTES + len;
                if whole <= free {
                    free.saturating_sub(buf.len())
                } else {
                    if !budget.is_admitted(token)
                        && let Admit::Waits { first } = budget.admit(token, whole, now)
                    {
                        return Plan::Wait { first };
                    }
                    // The rest of this frame, and the allowance for what follows it.
                    whole.saturating_sub(buf.len()).saturating_add(free)
                }
            }
        };
        let chunk = self.chunk_bytes.min(chunk_max.max(READ_CHUNK_MIN_BYTES));
        Plan::Read(room.min(chunk).max(1))
    }

    /// A read of at most `asked` bytes brought `got`: a read that filled its room doubles
    /// the next one (up to the caller's `chunk_max`).
    pub fn after_read(&mut self, asked: usize, got: usize) {
        if got >= asked && asked >= self.chunk_bytes {
            self.chunk_bytes = self.chunk_bytes.saturating_mul(2);
        }
    }

    /// Takes the next complete frame off `buf` ([`frame::decode`]); the first one after an
    /// admission is the admitted frame, whose bytes go back to the budget.
    pub fn decode(
        &mut self,
        token: Token,
        buf: &mut BytesMut,
        budget: &mut ReadBudget,
    ) -> Result<Option<frame::Frame>, FrameError> {
        let f = frame::decode(buf)?;
        if f.is_some() {
            budget.release(token);
        }
        Ok(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::{MAX_BODY_BYTES, encode_to_bytes};
    use bytes::Bytes;

    const FREE: usize = CLIENT_FREE_BYTES;
    const CHUNK_MAX: usize = 1 << 20;

    fn any_kind(_: u8) -> usize {
        MAX_BODY_BYTES
    }

    fn allow<F: Fn(u8) -> usize>(body_max: F) -> Allowance<F> {
        Allowance {
            free_bytes: FREE,
            chunk_max_bytes: CHUNK_MAX,
            body_max,
        }
    }

    /// A header announcing `len` body bytes of `kind`, then `body` (the start of the body).
    fn header(kind: u8, len: usize, body: &[u8]) -> BytesMut {
        let mut b = BytesMut::from(&encode_to_bytes(kind, 0, &[]).unwrap()[..]);
        b[8..12].copy_from_slice(&(len as u32).to_le_bytes());
        b.extend_from_slice(body);
        b
    }

    fn read(plan: Plan) -> usize {
        match plan {
            Plan::Read(n) => n,
            other => panic!("expected a read, got {other:?}"),
        }
    }

    #[test]
    fn a_new_connection_reads_a_small_chunk_that_grows_only_while_reads_fill_it() {
        let mut budget = ReadBudget::new(READ_BUDGET_BYTES_DEFAULT);
        let mut i = Intake::new();
        let t = Token(1);
        let n = read(i.plan(t, &[], &allow(any_kind), &mut budget, 0));
        assert_eq!(n, READ_CHUNK_MIN_BYTES);
        i.after_read(n, 10);
        assert_eq!(read(i.plan(t, &[], &allow(any_kind), &mut budget, 0)), n);
        let mut asked = n;
        for _ in 0..20 {
            i.after_read(asked, asked);
            asked = read(i.plan(t, &[], &allow(any_kind), &mut budget, 0));
        }
        assert_eq!(
            asked, FREE,
            "small frames: never more than the free allowance"
        );
    }

    #[test]
    fn a_large_frame_is_read_only_once_admitted_and_never_past_what_was_granted() {
        let mut budget = ReadBudget::new(2 * (HEADER_BYTES + MAX_BODY_BYTES));
        let now = 0;
        // Three connections announce the largest frame; the budget holds two.
        let bufs: Vec<BytesMut> = (0..3).map(|_| header(128, MAX_BODY_BYTES, b"xy")).collect();
        let mut intakes = [Intake::new(); 3];
        let plans: Vec<Plan> = (0..3)
            .map(|k| intakes[k].plan(Token(k), &bufs[k], &allow(any_kind), &mut budget, now))
            .collect();
        assert!(matches!(plans[0], Plan::Read(_)));
        assert!(matches!(plans[1], Plan::Read(_)));
        assert_eq!(plans[2], Plan::Wait { first: true });
        assert_eq!(budget.held_bytes(), 2 * (HEADER_BYTES + MAX_BODY_BYTES));
        // Asked again (more bytes arrived): still waiting, not counted twice.
        assert_eq!(
            intakes[2].plan(Token(2), &bufs[2], &allow(any_kind), &mut budget, now),
            Plan::Wait { first: false }
        );
        // An admitted frame reads in chunks that grow as bytes arrive.
        assert_eq!(read(plans[0].clone()), READ_CHUNK_MIN_BYTES);
        // Connection 0 completes its frame: the budget wakes connection 2, which fits.
        let mut whole = BytesMut::new();
        whole.extend_from_slice(
            &encode_to_bytes(128, 0, &[Bytes::from(vec![1u8; MAX_BODY_BYTES])]).unwrap(),
        );
        let f = intakes[0]
            .decode(Token(0), &mut whole, &mut budget)
            .unwrap();
        assert!(f.is_some());
        let mut woken = Vec::new();
        budget.take_woken(&mut woken);
        assert_eq!(woken, [Token(2)]);
        assert!(matches!(
            intakes[2].plan(Token(2), &bufs[2], &allow(any_kind), &mut budget, now),
            Plan::Read(_)
        ));
        assert_eq!(budget.waiting(), 0);
        // Closing gives everything back.
        budget.forget(Token(1));
        budget.forget(Token(2));
        assert_eq!(budget.held_bytes(), 0);
    }

    #[test]
    fn a_frame_larger_than_the_whole_budget_is_admitted_alone() {
        let mut budget = ReadBudget::new(1 << 20);
        let mut i = Intake::new();
        let buf = header(128, 8 << 20, b"");
        assert!(matches!(
            i.plan(Token(1), &buf, &allow(any_kind), &mut budget, 0),
            Plan::Read(_)
        ));
        // A second one waits until the first is done.
        assert_eq!(
            Intake::new().plan(Token(2), &buf, &allow(any_kind), &mut budget, 0),
            Plan::Wait { first: true }
        );
    }

    #[test]
    fn waiting_connections_are_served_in_arrival_order() {
        let mut budget = ReadBudget::new(3 << 20);
        let big = header(128, (2 << 20) - HEADER_BYTES, b"");
        let small_big = header(128, (1 << 20) - HEADER_BYTES, b"");
        let mut i = [Intake::new(); 3];
        assert!(matches!(
            i[0].plan(Token(0), &big, &allow(any_kind), &mut budget, 0),
            Plan::Read(_)
        ));
        // Token 1 needs 2 MiB and waits; token 2 needs 1 MiB, which would fit, but waits
        // behind token 1.
        assert!(matches!(
            i[1].plan(Token(1), &big, &allow(any_kind), &mut budget, 0),
            Plan::Wait { .. }
        ));
        assert!(matches!(
            i[2].plan(Token(2), &small_big, &allow(any_kind), &mut budget, 0),
            Plan::Wait { .. }
        ));
        budget.forget(Token(0));
        let mut woken = Vec::new();
        budget.take_woken(&mut woken);
        assert_eq!(woken, [Token(1)]);
        assert!(matches!(
            i[1].plan(Token(1), &big, &allow(any_kind), &mut budget, 0),
            Plan::Read(_)
        ));
        // Admitting the head wakes the next in line, which fits now.
        woken.clear();
        budget.take_woken(&mut woken);
        assert_eq!(woken, [Token(2)]);
        assert!(matches!(
            i[2].plan(Token(2), &small_big, &allow(any_kind), &mut budget, 0),
            Plan::Read(_)
        ));
    }

    #[test]
    fn a_frame_over_its_kinds_limit_is_refused_at_its_header() {
        let mut budget = ReadBudget::new(READ_BUDGET_BYTES_DEFAULT);
        let limit = |kind: u8| {
            if kind == 128 {
                MAX_BODY_BYTES
            } else {
                CONTROL_BODY_MAX_BYTES
            }
        };
        let status = header(138, CONTROL_BODY_MAX_BYTES + 1, b"");
        assert!(matches!(
            Intake::new().plan(Token(1), &status, &allow(limit), &mut budget, 0),
            Plan::Refuse(m) if m.contains("kind 138")
        ));
        assert_eq!(
            budget.held_bytes(),
            0,
            "nothing admitted for a refused frame"
        );
        let status = header(138, CONTROL_BODY_MAX_BYTES, b"");
        assert!(matches!(
            Intake::new().plan(Token(1), &status, &allow(limit), &mut budget, 0),
            Plan::Read(_)
        ));
    }

    #[test]
    fn an_overdue_frame_is_cut_only_while_another_connection_waits() {
        let mut budget = ReadBudget::new(HEADER_BYTES + MAX_BODY_BYTES);
        let buf = header(128, MAX_BODY_BYTES, b"");
        assert!(matches!(
            Intake::new().plan(Token(1), &buf, &allow(any_kind), &mut budget, 0),
            Plan::Read(_)
        ));
        let due = OVERDUE_GRACE_US + 66 * OVERDUE_US_PER_MIB;
        assert!(budget.overdue(due).is_empty(), "nobody waits");
        assert_eq!(budget.next_due(), None);
        assert!(matches!(
            Intake::new().plan(Token(2), &buf, &allow(any_kind), &mut budget, 5),
            Plan::Wait { first: true }
        ));
        assert_eq!(budget.next_due(), Some(due));
        assert!(budget.overdue(due - 1).is_empty());
        assert_eq!(budget.overdue(due), [Token(1)]);
        budget.forget(Token(1));
        let mut woken = Vec::new();
        budget.take_woken(&mut woken);
        assert_eq!(woken, [Token(2)]);
    }

    #[test]
    fn reads_never_bring_more_than_the_allowance_and_the_grant() {
        // Whatever the stream holds, after any read planned here the buffer holds at most
        // `free` bytes outside an admitted frame.
        let mut budget = ReadBudget::new(0);
        let mut i = Intake::new();
        // A header cut after 12 bytes of a large frame, waiting (the budget is empty but
        // another frame holds it).
        let other = header(128, 1 << 20, b"");
        assert!(matches!(
            Intake::new().plan(Token(9), &other, &allow(any_kind), &mut budget, 0),
            Plan::Read(_)
        ));
        let mut buf = header(128, MAX_BODY_BYTES, b"");
        buf.truncate(12);
        assert_eq!(
            i.plan(Token(1), &buf, &allow(any_kind), &mut budget, 0),
            Plan::Wait { first: true }
        );
        // Fewer than 12 bytes: the kind and length are not known yet; read up to the
        // allowance.
        buf.truncate(5);
        let n = read(i.plan(Token(3), &buf, &allow(any_kind), &mut budget, 0));
        assert!(buf.len() + n <= FREE);
    }
}
