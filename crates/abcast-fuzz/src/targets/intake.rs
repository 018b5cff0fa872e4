//! The stream intake (`abcast_runtime::transport::intake`): what two connections of one
//! port may read before the bytes arrive, sharing the port's read budget, while they send
//! whatever they like.
//!
//! Input: a settings byte (client or peer port, budget size), then steps: a connection
//! (bit 0 of the step byte), and how many bytes it offers now (`u16`) followed by those
//! bytes. A step asks the intake for a plan, reads what the plan allows of the offered
//! bytes (the rest wait in the connection's stream), decodes the frames at the front, and
//! moves the clock.
//! Checks: a plan reads at least one byte; after a read, the connection holds at most its
//! free allowance, plus the whole frame at its front if that frame was larger; a refused
//! frame and the closed connection give back what they held; when both close, the budget
//! holds nothing and nobody waits.

use crate::input::Input;
use abcast_runtime::frame::{self, HEADER_BYTES, MAX_BODY_BYTES};
use abcast_runtime::transport::intake::{
    Allowance, CLIENT_FREE_BYTES, CONTROL_BODY_MAX_BYTES, Intake, OVERDUE_GRACE_US, Plan,
    ReadBudget,
};
use bytes::BytesMut;
use mio::Token;
use std::collections::VecDeque;

/// Steps per input: bounds the work of one run.
const STEPS_MAX: usize = 256;

struct Conn {
    token: Token,
    intake: Intake,
    buf: BytesMut,
    /// Bytes sent and not read yet.
    pending: VecDeque<u8>,
    open: bool,
}

fn client_body_max(kind: u8) -> usize {
    match kind {
        128 | 147 => MAX_BODY_BYTES,
        _ => CONTROL_BODY_MAX_BYTES,
    }
}

fn peer_body_max(kind: u8) -> usize {
    match kind {
        0 => 256,
        _ => MAX_BODY_BYTES,
    }
}

pub fn intake(data: &[u8]) {
    let mut input = Input::new(data);
    let Some(settings) = input.u8() else { return };
    let client = settings & 1 == 0;
    // Budgets: none, less than one free allowance, a few allowances, the default.
    let budget_bytes = match (settings >> 1) & 3 {
        0 => 0,
        1 => CLIENT_FREE_BYTES / 2,
        2 => 4 * CLIENT_FREE_BYTES,
        _ => abcast_runtime::transport::intake::READ_BUDGET_BYTES_DEFAULT,
    };
    let free = if client { CLIENT_FREE_BYTES } else { 4096 };
    let allow = Allowance {
        free_bytes: free,
        chunk_max_bytes: 1 << 20,
        body_max: if client {
            client_body_max as fn(u8) -> usize
        } else {
            peer_body_max
        },
    };
    let mut budget = ReadBudget::new(budget_bytes);
    let mut conns: Vec<Conn> = (0..2)
        .map(|i| Conn {
            token: Token(i),
            intake: Intake::new(),
            buf: BytesMut::new(),
            pending: VecDeque::new(),
            open: true,
        })
        .collect();
    let mut now = 0u64;
    let mut woken = Vec::new();
    for _ in 0..STEPS_MAX {
        let Some(step) = input.u8() else { break };
        let Some(sent) = input.string16() else { break };
        let c = &mut conns[usize::from(step & 1)];
        now += u64::from(step >> 1) * (OVERDUE_GRACE_US / 16);
        if !c.open {
            continue;
        }
        c.pending.extend(sent);
        match c.intake.plan(c.token, &c.buf, &allow, &mut budget, now) {
            Plan::Read(n) => {
                assert!(n > 0, "a plan to read nothing");
                let got = n.min(c.pending.len());
                c.buf.extend(c.pending.drain(..got));
                c.intake.after_read(n, got);
                assert_within_allowance(&c.buf, free);
                loop {
                    match c.intake.decode(c.token, &mut c.buf, &mut budget) {
                        Ok(Some(_)) => {}
                        Ok(None) => break,
                        Err(_) => {
                            close(c, &mut budget);
                            break;
                        }
                    }
                }
            }
            Plan::Wait { .. } => {}
            Plan::Refuse(_) => close(c, &mut budget),
        }
        for t in budget.overdue(now) {
            close(&mut conns[t.0], &mut budget);
        }
        let _ = budget.next_due();
        woken.clear();
        budget.take_woken(&mut woken);
    }
    for c in &mut conns {
        close(c, &mut budget);
    }
    assert_eq!(
        budget.held_bytes(),
        0,
        "closed connections still hold the budget"
    );
    assert_eq!(budget.waiting(), 0, "closed connections still wait");
}

fn close(c: &mut Conn, budget: &mut ReadBudget) {
    c.open = false;
    c.buf.clear();
    c.pending.clear();
    budget.forget(c.token);
}

/// After a read: at most the free allowance, plus the front frame when it is larger.
fn assert_within_allowance(buf: &[u8], free: usize) {
    let front = frame::peek_body_len(buf).map_or(0, |len| HEADER_BYTES + len);
    let bound = if front > free { front + free } else { free };
    assert!(
        buf.len() <= bound,
        "a read brought the buffer to {} bytes, over the allowance {free} (front frame {front})",
        buf.len()
    );
}
