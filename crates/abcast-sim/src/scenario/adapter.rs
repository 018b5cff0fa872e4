//! What the scenario runner needs to know about one protocol family: how to build node `i`
//! from the `cluster` command's options, and a short, stable description of a message. Each
//! family's adapter lives in one file (`uring.rs`, `ringpaxos.rs`, `multiring.rs`): a change
//! to a protocol's message structs touches only its adapter, never the runner or the
//! scenario files (unless the description itself changes).

use super::datadriven::Arg;
use abcast_core::config::StartInfo;
use abcast_core::{Ballot, Instance, Micros, NodeId, Outbox, ProposeError, Protocol, ValueId};
use bytes::Bytes;
use std::str::FromStr;

/// A message as the scenario trace shows it: `kind from -> to b=ballot i=instance`, plus a
/// short `detail` printed only at the `msgs` level and in `held`.
#[derive(Clone, Debug, Default)]
pub struct MsgInfo {
    /// A short stable name (`phase2`, `decision`, ...): what `kind=` filters match.
    pub kind: &'static str,
    /// The group (ring) of a composite protocol's message.
    pub group: Option<u16>,
    pub ballot: Option<Ballot>,
    pub instance: Option<Instance>,
    /// Payloads the message carries (what `value=` filters match).
    pub values: Vec<Bytes>,
    /// Background chatter (heartbeats, rate reports): shown only at the `all` level.
    pub background: bool,
    /// A few fields worth seeing in a story (an epoch, a repair target).
    pub detail: String,
}

impl MsgInfo {
    pub fn new(kind: &'static str) -> MsgInfo {
        MsgInfo {
            kind,
            ..MsgInfo::default()
        }
    }
    pub fn ballot(mut self, b: Ballot) -> MsgInfo {
        self.ballot = Some(b);
        self
    }
    pub fn instance(mut self, i: Instance) -> MsgInfo {
        self.instance = Some(i);
        self
    }
    pub fn values(mut self, v: impl IntoIterator<Item = Bytes>) -> MsgInfo {
        self.values.extend(v);
        self
    }
    pub fn background(mut self) -> MsgInfo {
        self.background = true;
        self
    }
    pub fn detail(mut self, d: impl Into<String>) -> MsgInfo {
        self.detail = d.into();
        self
    }
}

/// One protocol family, as the scenario runner drives it.
pub trait Adapter: Sized + 'static {
    type P: Protocol;

    /// The `protocol=` name.
    const NAME: &'static str;

    /// The deployment the `cluster` command describes; `args` holds its options (`nodes=`
    /// included). Take what you use; the runner refuses what is left.
    fn configure(args: &mut Args) -> Result<Self, String>;

    /// Every node, in id order (ids are `0..n`).
    fn node_ids(&self) -> Vec<NodeId>;

    /// Node `id` in its life `start`, over an empty in-memory store.
    fn build(&self, id: NodeId, start: StartInfo) -> Result<Self::P, String>;

    /// A message takes one round (100 us) to arrive, instead of every message of a round
    /// arriving within it: for a protocol that never lets the network empty while it has
    /// work (a token ring passes its token on at once while a retransmission is asked for).
    const ONE_HOP_PER_ROUND: bool = false;

    /// A short, stable description of a message.
    fn describe(msg: &<Self::P as Protocol>::Message) -> MsgInfo;

    /// How a configuration id reads in a story (the token ring's ring numbers carry the
    /// creator's life in their low bits).
    fn config_label(id: u64) -> String {
        id.to_string()
    }

    /// Facts beyond `Protocol::status` for the `status` line (`log_start=12`).
    fn details(node: &Self::P) -> Vec<String> {
        let _ = node;
        Vec::new()
    }

    /// Proposes to one group (`propose group=`), for a protocol that runs several.
    fn propose_to(
        node: &mut Self::P,
        now: Micros,
        group: u16,
        payload: Bytes,
        out: &mut Outbox<<Self::P as Protocol>::Message>,
    ) -> Result<Result<ValueId, ProposeError>, String> {
        let _ = (node, now, payload, out);
        Err(format!("{} runs one group; no group={group}", Self::NAME))
    }
}

/// A command's arguments, taken one by one; what nobody took is an error (a typo in a
/// scenario file must not pass silently).
#[derive(Clone, Debug, Default)]
pub struct Args {
    args: Vec<Arg>,
}

impl Args {
    pub fn new(args: &[Arg]) -> Args {
        Args {
            args: args.to_vec(),
        }
    }

    fn take(&mut self, key: &str) -> Option<Arg> {
        let i = self.args.iter().position(|a| a.key == key)?;
        Some(self.args.remove(i))
    }

    /// A bare flag (`amnesic`).
    pub fn flag(&mut self, key: &str) -> Result<bool, String> {
        match self.take(key) {
            None => Ok(false),
            Some(a) if a.vals.is_empty() => Ok(true),
            Some(a) => Err(format!("{key} is a flag, it takes no value ({:?})", a.vals)),
        }
    }

    /// A list (`values=a,b`); empty if absent.
    pub fn list(&mut self, key: &str) -> Vec<String> {
        self.take(key).map(|a| a.vals).unwrap_or_default()
    }

    /// A list of parsed values.
    pub fn parsed_list<T: FromStr>(&mut self, key: &str) -> Result<Vec<T>, String>
    where
        T::Err: std::fmt::Display,
    {
        self.list(key)
            .iter()
            .map(|v| v.parse().map_err(|e| format!("{key}={v}: {e}")))
            .collect()
    }

    /// One optional value.
    pub fn opt<T: FromStr>(&mut self, key: &str) -> Result<Option<T>, String>
    where
        T::Err: std::fmt::Display,
    {
        match self.take(key) {
            None => Ok(None),
            Some(a) if a.vals.len() == 1 => a.vals[0]
                .parse()
                .map(Some)
                .map_err(|e| format!("{key}={}: {e}", a.vals[0])),
            Some(a) => Err(format!("{key} takes one value, not {:?}", a.vals)),
        }
    }

    /// One value that must be there.
    pub fn req<T: FromStr>(&mut self, key: &str) -> Result<T, String>
    where
        T::Err: std::fmt::Display,
    {
        self.opt(key)?.ok_or_else(|| format!("{key}= is missing"))
    }

    /// Fails if an argument was not taken.
    pub fn done(&self) -> Result<(), String> {
        match self.args.first() {
            None => Ok(()),
            Some(a) => Err(format!("unknown argument {:?}", a.key)),
        }
    }
}
