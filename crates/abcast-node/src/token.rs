//! `protocol = "token"`: the Accelerated Ring and the original Totem ring of seed 002
//! (`abcast_core::token`) as `abcast node` runs them, and its `[token]` section.
//!
//! ```toml
//! protocol = "token"
//! [token]                        # every field optional; defaults from TokenConfig
//! personal_window = 30           # new data messages per member per token round
//! accelerated_window = 20        # of them, sent after the token; 0 = the original ring
//! global_window = 240            # data messages per round, all members together
//! max_message_bytes = 1350       # payload bytes one data message (one datagram) packs;
//!                                # 1350 fits a 1500-byte frame, 8850 the seed's large one
//! max_value_bytes = 1048576      # the largest value propose takes
//! window_values = 65536          # values waiting for the token (then `Busy`)
//! service = "agreed"             # or "safe" (delivered once every member has it)
//! token_retransmit_us = 5000     # a token passed and not seen taken is sent again
//! token_hold_us = 1000           # an idle ring holds the token this long per member,
//! idle_before_hold_us = 10000    #   once it has been idle this long
//! token_timeout_us = 100000      # no token this long: lost, the members gather
//! join_timeout_us = 10000
//! consensus_timeout_us = 120000
//! merge_timeout_us = 100000
//! holddown_us = 250000           # flap damping: a processor failed by a gather is held
//! holddown_max_us = 2000000      #   down this long, doubling to this at repeated failures
//! holddown_forget_us = 10000000  #   within this; 0 = no damping
//! fail_to_recv_rotations = 250   # a member that held the aru down this many rotations
//!                                #   in a row fails itself (Corosync fail_recv_const)
//! buffer_messages_max = 16384    # messages of the ring a member buffers at most
//! token_port_offset = 200        # the token's own UDP socket: peer port + this
//! process_groups = false         # true: named process groups (abcast join, leave,
//!                                # multicast, listen) over the ring; set it on every member
//! ```
//!
//! The ring is the `[[members]]` list; every member proposes and delivers. Transport
//! (seed 002 §III-E): data messages by UDP IP-multicast with `[multicast]`, or, without it,
//! as one UDP datagram to each member (a logical multicast); the token and the commit token
//! by UDP unicast on a socket of their own, the peer port plus `token_port_offset`, so the
//! loop weighs token against data (§III-D, `abcast_runtime` `driver/lanes.rs`).
//! `[transport] unicast = "tcp"` sends everything to one peer by TCP instead (no token
//! socket), for networks that drop UDP. A message too large for one datagram goes by TCP.

use crate::nodeconfig::{NodeConfig, NodeConfigError};
use abcast_core::NodeId;
use abcast_core::config::{ConfigError, StartInfo};
use abcast_core::token::{Service, TokenConfig, TokenRing};
use serde::Deserialize;

/// `token_port_offset` unless the file says: the demo's clusters put peers on `base + i`
/// and clients on `base + 100 + i`, so tokens on `base + 200 + i` collide with neither.
pub const TOKEN_PORT_OFFSET_DEFAULT: u16 = 200;

/// `[token]` as the file spells it.
#[derive(Deserialize, Default, Debug)]
#[serde(deny_unknown_fields)]
pub(crate) struct FileToken {
    personal_window: Option<u32>,
    accelerated_window: Option<u32>,
    global_window: Option<u32>,
    max_message_bytes: Option<usize>,
    max_value_bytes: Option<usize>,
    window_values: Option<usize>,
    service: Option<String>,
    token_retransmit_us: Option<u64>,
    token_hold_us: Option<u64>,
    idle_before_hold_us: Option<u64>,
    token_timeout_us: Option<u64>,
    join_timeout_us: Option<u64>,
    consensus_timeout_us: Option<u64>,
    merge_timeout_us: Option<u64>,
    holddown_us: Option<u64>,
    holddown_max_us: Option<u64>,
    holddown_forget_us: Option<u64>,
    fail_to_recv_rotations: Option<u32>,
    buffer_messages_max: Option<u64>,
    /// Read wide so that a value out of range names its field.
    token_port_offset: Option<u64>,
    process_groups: Option<bool>,
}

impl FileToken {
    /// `process_groups = true`: process groups run over the ring (off by default: each
    /// member then multicasts its members after every configuration change, values that
    /// plain `abcast learn` subscribers see in the sequence).
    pub(crate) fn process_groups(&self) -> bool {
        self.process_groups.unwrap_or(false)
    }
}

fn invalid<T>(field: impl Into<String>, reason: impl Into<String>) -> Result<T, NodeConfigError> {
    Err(NodeConfigError::Invalid {
        field: field.into(),
        reason: reason.into(),
    })
}

/// The ring of `members` with `[token]`'s settings, checked as this node `me` will run it
/// (`TokenConfig::validate`), and the token socket's port offset. Errors name the field as
/// the file does (`token.accelerated_window`).
pub(crate) fn token_config(
    file: Option<&FileToken>,
    members: &[NodeId],
    me: NodeId,
) -> Result<(TokenConfig, u16), NodeConfigError> {
    let mut c = TokenConfig::new(members.to_vec());
    let default = FileToken::default();
    let f = file.unwrap_or(&default);
    macro_rules! set {
        ($($field:ident),*) => {
            $(if let Some(v) = f.$field {
                c.$field = v;
            })*
        };
    }
    set!(
        personal_window,
        accelerated_window,
        global_window,
        max_message_bytes,
        max_value_bytes,
        window_values,
        token_retransmit_us,
        token_hold_us,
        idle_before_hold_us,
        token_timeout_us,
        join_timeout_us,
        consensus_timeout_us,
        merge_timeout_us,
        holddown_us,
        holddown_max_us,
        holddown_forget_us,
        fail_to_recv_rotations,
        buffer_messages_max
    );
    if let Some(s) = &f.service {
        c.service = match s.as_str() {
            "agreed" => Service::Agreed,
            "safe" => Service::Safe,
            other => {
                return invalid(
                    "token.service",
                    format!("{other:?}: expected \"agreed\" or \"safe\""),
                );
            }
        };
    }
    let offset = match f.token_port_offset {
        None => TOKEN_PORT_OFFSET_DEFAULT,
        Some(0) => {
            return invalid(
                "token.token_port_offset",
                "0 would put the token on the data socket; the token needs a port of its own \
                 (seed 002 §III-E)",
            );
        }
        Some(v) => match u16::try_from(v) {
            Ok(v) => v,
            Err(_) => return invalid("token.token_port_offset", format!("{v}: at most 65535")),
        },
    };
    if let Err(e) = c.validate(me) {
        let field = match e.field {
            "members" => "members".to_string(),
            f => format!("token.{f}"),
        };
        return invalid(field, e.reason);
    }
    Ok((c, offset))
}

/// The token ring as the config describes it (`protocol = "token"`).
pub fn token_protocol(cfg: &NodeConfig, start: StartInfo) -> Result<TokenRing, ConfigError> {
    let Some(tc) = cfg.token.clone() else {
        return Err(ConfigError {
            field: "protocol",
            reason: "not \"token\"".into(),
        });
    };
    let data = match &cfg.transport.multicast {
        Some(m) => format!("UDP multicast to {} via {}", m.group, m.interface),
        None if cfg.transport.control_port_offset.is_some() => {
            "one UDP datagram to each member (logical multicast)".to_string()
        }
        None => "one TCP copy to each member".to_string(),
    };
    let token = match cfg.transport.control_port_offset {
        Some(o) => format!("UDP on its own socket (peer port + {o})"),
        None => "TCP".to_string(),
    };
    eprintln!(
        "[{}] token ring of {} members, {}: personal_window {}, accelerated_window {}, \
         global_window {}, {} payload bytes per message; data by {data}, the token by {token}",
        cfg.node_id,
        tc.members.len(),
        if tc.accelerated_window == 0 {
            "the original Totem ring"
        } else {
            "the Accelerated Ring"
        },
        tc.personal_window,
        tc.accelerated_window,
        tc.global_window,
        tc.max_message_bytes
    );
    TokenRing::new(tc, cfg.node_id, start)
}
