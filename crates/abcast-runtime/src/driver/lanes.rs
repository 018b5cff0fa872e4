//! Which socket the loop reads first when the token and data both wait: seed 002 §III-D
//! ("Selecting a Message to Handle"), on the two sockets of §III-E.
//!
//! The token ring's token (and commit token) arrive on the control lane's socket, data on
//! the data socket (or the multicast group's). §III-D: "A participant always gives data
//! messages high priority after processing a token", so that the data messages reflected
//! in the token it passed are processed before the next token (else they are asked for
//! again, needlessly); and it raises the token's priority again by one of two methods:
//!
//! 1. "as soon as it processes any data message its immediate predecessor in the ring
//!    sent in the next token round" (the seed's prototypes; the token turns fastest);
//! 2. only once it processes a data message the predecessor sent in the next round
//!    *after* having sent the token (Spread; less sensitive to misconfiguration).
//!
//! We implement the first, as the seed's prototypes do. The second needs to know which of
//! the predecessor's messages left after its token, and the data message carries no such
//! mark (seed 002 §III-C: `seq`, `pid`, `round`, payload).
//!
//! What the rule needs comes from the messages alone ([`WireMessage::lane`],
//! [`WireMessage::order_seq`]), so the runtime stays protocol-neutral: the predecessor is
//! the peer the last token came from; "sent in the next round" is a sequence number above
//! the `seq` of the token this node passed (numbers above it are assigned only once the
//! token moved on from here, that is, in the next round). A message of a new ring
//! (numbers start again at 1) only leaves data first until the next token: priority never
//! decides what is delivered, only how soon (§III-D: "decisions about when to process
//! messages of different types can impact performance but do not affect the correctness
//! of the protocol"), and neither lane waits for ever: the lane without priority is read
//! whenever the other has nothing.

use abcast_core::NodeId;
use abcast_core::codec::{Lane, WireMessage};

/// The §III-D state of one node (see the module comment).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct LanePriority {
    /// The lane served first while both have messages.
    first: Lane,
    /// The peer the last control message came from: the predecessor on the ring.
    predecessor: Option<NodeId>,
    /// The `seq` of the last token this node passed.
    passed_seq: Option<u64>,
}

impl LanePriority {
    /// Before any token: the token first (nothing it reflects can be missing yet).
    pub(super) fn new() -> LanePriority {
        LanePriority {
            first: Lane::Control,
            predecessor: None,
            passed_seq: None,
        }
    }

    /// The lane to read first now.
    pub(super) fn first(&self) -> Lane {
        self.first
    }

    /// This node sent `msg` to a peer.
    pub(super) fn on_sent<M: WireMessage>(&mut self, msg: &M) {
        if msg.lane() == Lane::Control {
            self.passed_seq = msg.order_seq();
        }
    }

    /// This node processed `msg` from `from` (whichever socket it came on).
    pub(super) fn on_processed<M: WireMessage>(&mut self, from: NodeId, msg: &M) {
        match msg.lane() {
            Lane::Control => {
                // "A participant always gives data messages high priority after processing
                // a token."
                self.predecessor = Some(from);
                self.first = Lane::Data;
            }
            Lane::Data => {
                // Method 1: the predecessor's data message of the next round.
                let next_round = match (msg.order_seq(), self.passed_seq) {
                    (Some(seq), Some(passed)) => seq > passed,
                    (Some(_), None) => true,
                    (None, _) => false,
                };
                if self.first == Lane::Data && self.predecessor == Some(from) && next_round {
                    self.first = Lane::Control;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use abcast_core::token::Message;
    use abcast_core::token::messages::{Data, RingId, Service, Token};
    use abcast_core::types::BatchBuilder;

    fn token(seq: u64) -> Message {
        Message::Token(Token {
            ring: RingId::default(),
            hop: 1,
            rotation: 1,
            seq,
            aru: 0,
            aru_id: None,
            fcc: 0,
            rtr: Vec::new(),
            retrans_flg: false,
        })
    }

    fn data(seq: u64, pid: u32) -> Message {
        Message::Data(Data {
            ring: RingId::default(),
            seq,
            pid: NodeId(pid),
            round: 1,
            service: Service::Agreed,
            batch: {
                let mut b = BatchBuilder::new(NodeId(pid), 0, 0);
                b.push(b"v");
                b.finish()
            },
            inner: None,
        })
    }

    #[test]
    fn the_token_ring_puts_its_tokens_on_the_control_lane() {
        assert_eq!(token(3).lane(), Lane::Control);
        assert_eq!(token(3).order_seq(), Some(3));
        assert_eq!(data(4, 1).lane(), Lane::Data);
        assert_eq!(data(4, 1).order_seq(), Some(4));
    }

    #[test]
    fn data_first_after_a_token_until_the_predecessor_sends_in_the_next_round() {
        // Node 1 on a ring 0 -> 1 -> 2 -> 0: its predecessor is 0.
        let mut p = LanePriority::new();
        assert_eq!(p.first(), Lane::Control);
        p.on_processed(NodeId(0), &token(10));
        assert_eq!(p.first(), Lane::Data, "after a token, data first");
        p.on_sent(&token(15));
        // This round's messages, and the next round's of a node other than the
        // predecessor, leave data first.
        p.on_processed(NodeId(0), &data(9, 0));
        p.on_processed(NodeId(2), &data(16, 2));
        assert_eq!(p.first(), Lane::Data);
        // The predecessor's message of the next round (above the seq passed): the token
        // has priority again (method 1).
        p.on_processed(NodeId(0), &data(18, 0));
        assert_eq!(p.first(), Lane::Control);
        p.on_processed(NodeId(0), &token(20));
        assert_eq!(p.first(), Lane::Data);
    }
}
