//! The token ring's parameters (seed 002 §III-B1 windows, §IV-A "Personal_windows of a few
//! tens of messages with Accelerated_windows of half to all of the Personal_window").

use crate::config::ConfigError;
use crate::types::{Micros, NodeId};

use super::messages::Service;

/// `fail_to_recv_rotations` unless configured: Corosync's 2500 (`fail_recv_const`) scaled
/// by our token timeout. A ring whose aru is held down never holds its token (the ring is
/// not idle), so rotations come at network speed: on a LAN a tenth of a millisecond to a
/// millisecond, and Corosync's 2500 rotations are then about one of its 1 s token timeouts
/// or less. Our token timeout is 100 ms, a tenth of Corosync's 2.x default, so 250 rotations
/// keep the same ratio: a member that gets the token but no data is removed about as fast
/// as one that crashed. In the simulator (20-300 µs a hop) that is 120 ms with three
/// members and 200 ms with five. A member that merely lost messages asks for them every
/// round (and each request skips to another holder when asked again, `Rtr::skip`), so
/// keeping the aru still for 250 rounds in a row takes a loss no retransmission gets
/// through: the simulator's 20 % loss never fails a member.
pub const FAIL_TO_RECV_ROTATIONS: u32 = 250;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenConfig {
    /// The ring, in token order. Every member proposes and delivers.
    pub members: Vec<NodeId>,
    /// `Personal_window`: new data messages one member sends per token round at most.
    pub personal_window: u32,
    /// `Accelerated_window`: how many of them may leave after the token. 0 is the original
    /// Totem ring (every message before the token, retransmission requests up to the
    /// token's `seq`).
    pub accelerated_window: u32,
    /// `Global_window`: data messages (new and retransmitted) all members together send
    /// per token round at most.
    pub global_window: u32,
    /// Payload bytes one data message packs at most (1350 fits one 1500-byte frame with
    /// headers; about 8850 for the seed's large datagrams).
    pub max_message_bytes: usize,
    /// The largest value `propose` takes.
    pub max_value_bytes: usize,
    /// Values waiting to be sent, at most (`propose` says `Busy` past it).
    pub window_values: usize,
    /// The service of `propose` (`Protocol::propose_at` picks one per value).
    pub service: Service,
    /// A member that passed the token and heard nothing that shows its successor took it
    /// (the token again, or a message stamped after it) sends it again after this long; the
    /// successor takes one copy (`Token::hop`).
    pub token_retransmit_us: Micros,
    /// On an idle ring (nothing to send, retransmit or deliver) a member holds the token this
    /// long before passing it (Corosync's `token_hold`), so an idle ring does not spin.
    pub token_hold_us: Micros,
    /// The ring must have been idle this long (no token of the period carried a message,
    /// a retransmission request or an aru behind its seq) before a member holds the token.
    /// A held token makes a value proposed at another member wait for the hold, so a ring
    /// under any load keeps its token moving and only a ring idle for a while holds it
    /// (Corosync cancels a hold with a message instead; seed 002's ring never holds). 0:
    /// hold at the first idle token.
    pub idle_before_hold_us: Micros,
    /// No token for this long: the token is lost, and the members gather (Totem's token
    /// loss timeout; Corosync's `token`, 1 s there, shorter for a LAN here).
    pub token_timeout_us: Micros,
    /// A gathering member multicasts its join again after this long (Corosync `join`).
    pub join_timeout_us: Micros,
    /// Members that have not agreed within this long are failed (Corosync `consensus`,
    /// 1.2 x `token`).
    pub consensus_timeout_us: Micros,
    /// An idle ring's representative announces the ring this often, so that a ring it
    /// cannot see merges with it after a partition heals (Corosync `merge`).
    pub merge_timeout_us: Micros,
    /// Flap damping (not in Totem; corosync issue 760): a processor failed by the gather
    /// that formed a ring is held down this long (doubling at each further failure within
    /// `holddown_forget_us` of the last, at most `holddown_max_us`): its merge announcements and foreign
    /// messages do not start a gather (its joins still do: it wants in, and if the link
    /// works both ways again the ring forms). A link that works one way only (the
    /// processor hears this member, not the other way round) otherwise makes the ring
    /// merge and split again every merge period. 0: no damping.
    pub holddown_us: Micros,
    pub holddown_max_us: Micros,
    pub holddown_forget_us: Micros,
    /// Totem's "failed to receive" rule (Corosync's `fail_recv_const`, there 2500): a member
    /// that has held the token's `aru` down for more than this many rotations in a row
    /// (the `aru` unchanged, and this member the one holding it: it gets the token but not
    /// the data) declares itself failed, and the others form a ring without it
    /// (`membership.rs`, `fail_to_recv`). Without it such a member stops Safe delivery,
    /// discarding and every acknowledgement for good.
    pub fail_to_recv_rotations: u32,
    /// Messages of the ring one member buffers at most: the token holder stamps no new
    /// message that would put the ring's `seq` more than this above its discard point less
    /// one `global_window` (Corosync's `fcc_rtr_limit` over its sort queue of
    /// `QUEUE_RTR_ITEMS_SIZE_MAX` = 16384 messages), and a data message further than twice
    /// this above the discard point is dropped (it is sent again once there is room). A
    /// member that lags makes the ring wait, not every member's memory grow.
    pub buffer_messages_max: u64,
    /// Broken variant for the simulator's mutation sweeps (tests only).
    pub mutation: crate::mutation::Slot,
}

impl Default for TokenConfig {
    fn default() -> Self {
        TokenConfig {
            members: Vec::new(),
            personal_window: 30,
            accelerated_window: 20,
            global_window: 240,
            max_message_bytes: 1350,
            max_value_bytes: 1 << 20,
            window_values: 1 << 16,
            service: Service::Agreed,
            token_retransmit_us: 5_000,
            token_hold_us: 1_000,
            idle_before_hold_us: 10_000,
            token_timeout_us: 100_000,
            join_timeout_us: 10_000,
            consensus_timeout_us: 120_000,
            merge_timeout_us: 100_000,
            holddown_us: 250_000,
            holddown_max_us: 2_000_000,
            holddown_forget_us: 10_000_000,
            fail_to_recv_rotations: FAIL_TO_RECV_ROTATIONS,
            buffer_messages_max: 16_384,
            mutation: crate::mutation::Slot::default(),
        }
    }
}

impl TokenConfig {
    /// A ring of `members` with the default windows.
    pub fn new(members: Vec<NodeId>) -> TokenConfig {
        TokenConfig {
            members,
            ..TokenConfig::default()
        }
    }

    /// Checks every field; a clear error names the first that is wrong.
    pub fn validate(&self, me: NodeId) -> Result<(), ConfigError> {
        let err = |field: &'static str, reason: String| Err(ConfigError { field, reason });
        if self.members.is_empty() {
            return err("members", "a ring needs at least one member".into());
        }
        if self.members.len() > 1024 {
            return err(
                "members",
                format!("{} members: at most 1024", self.members.len()),
            );
        }
        let mut seen = std::collections::HashSet::new();
        for m in &self.members {
            if !seen.insert(*m) {
                return err("members", format!("{m} appears twice"));
            }
        }
        if !self.members.contains(&me) {
            return err(
                "members",
                format!("this node {me} is not a member of the ring"),
            );
        }
        if self.personal_window == 0 {
            return err("personal_window", "at least 1".into());
        }
        if self.accelerated_window > self.personal_window {
            return err(
                "accelerated_window",
                format!(
                    "{} exceeds personal_window {}",
                    self.accelerated_window, self.personal_window
                ),
            );
        }
        if self.global_window < self.personal_window {
            return err(
                "global_window",
                format!(
                    "{} is below personal_window {}",
                    self.global_window, self.personal_window
                ),
            );
        }
        if self.max_message_bytes < 64 || self.max_message_bytes > 60_000 {
            return err(
                "max_message_bytes",
                format!("{} outside 64..=60000", self.max_message_bytes),
            );
        }
        if self.max_value_bytes == 0 {
            return err("max_value_bytes", "at least 1".into());
        }
        if self.window_values == 0 {
            return err("window_values", "at least 1".into());
        }
        if self.token_retransmit_us == 0 {
            return err("token_retransmit_us", "at least 1".into());
        }
        if self.token_timeout_us <= 2 * self.token_retransmit_us {
            return err(
                "token_timeout_us",
                format!(
                    "{} must exceed twice token_retransmit_us {}: a token sent again must have time to come",
                    self.token_timeout_us, self.token_retransmit_us
                ),
            );
        }
        if self.join_timeout_us == 0 || self.join_timeout_us >= self.consensus_timeout_us {
            return err(
                "join_timeout_us",
                format!(
                    "{} must be above 0 and below consensus_timeout_us {}",
                    self.join_timeout_us, self.consensus_timeout_us
                ),
            );
        }
        if self.merge_timeout_us == 0 {
            return err("merge_timeout_us", "at least 1".into());
        }
        if self.holddown_max_us < self.holddown_us {
            return err(
                "holddown_max_us",
                format!(
                    "{} is below holddown_us {}",
                    self.holddown_max_us, self.holddown_us
                ),
            );
        }
        if self.fail_to_recv_rotations == 0 {
            return err("fail_to_recv_rotations", "at least 1".into());
        }
        if self.buffer_messages_max < 2 * u64::from(self.global_window) {
            return err(
                "buffer_messages_max",
                format!(
                    "{} is below twice global_window {}: a round's messages must fit",
                    self.buffer_messages_max, self.global_window
                ),
            );
        }
        if self.buffer_messages_max > 1 << 24 {
            return err(
                "buffer_messages_max",
                format!("{}: at most {}", self.buffer_messages_max, 1u64 << 24),
            );
        }
        if self.token_hold_us >= self.token_retransmit_us {
            return err(
                "token_hold_us",
                format!(
                    "{} is not below token_retransmit_us {}: a held token would be sent again",
                    self.token_hold_us, self.token_retransmit_us
                ),
            );
        }
        Ok(())
    }

    pub fn mutation(&self) -> Option<crate::mutation::Mutation> {
        self.mutation.get()
    }
}
