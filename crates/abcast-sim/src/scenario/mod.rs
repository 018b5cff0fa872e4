//! Scenario tests that read as stories (issue 16), in the style of etcd-io/raft's
//! interaction tests (`rafttest/interaction_env*.go`, `testdata/*.txt`) and the
//! cockroachdb/datadriven file format ([`datadriven`]).
//!
//! A scenario file is a list of commands, each followed by `----` and the output it must
//! print: the deliveries, events and messages it caused (as much as the trace level
//! shows) and whatever the command reports. `REWRITE=1` writes the actual outputs back.
//! The world is [`env::Env`]: nodes of one protocol on one in-process FIFO network, with a
//! clock that moves only when a command says so. A protocol enters through an
//! [`Adapter`] (how to build node `i`; a short, stable description of a message); each
//! family's adapter is one file here, and [`new_cluster`] is the one place that names them.
//!
//! Commands (`[...]` optional; `node=0,1` lists; every command takes `trace=LEVEL` for
//! itself, LEVEL one of quiet, deliveries (the default), events, msgs, all):
//!
//! - `cluster protocol=P nodes=N [options]`: a new cluster, every node started fresh
//!   (options: [`uring`], [`ringpaxos`], [`multiring`], [`raft`], [`seqpaxos`], [`token`]).
//! - `needs mutations`: skip the file (with a note) in a build without the broken variants.
//! - `trace level=L`: the default level from here on.
//! - `propose node=I[,J..] values=a,b|v0..v9 [group=G] [every-us=U]`: one `propose` per
//!   value (round-robin over the nodes), with `run us=U` after each if given.
//! - `tick [node=I] [us=U]`: the clock moves U (default 0) and the nodes tick once; no
//!   message moves.
//! - `run us=U`: rounds of 100 us (every running node ticks, then the network empties).
//!   `run until=leading node=I[,J..] max-us=U [step-us=S] [timed]`: until one of the nodes
//!   leads (fails past U); `timed` says how long it took. `run until=delivered
//!   node=I[,J..] value=V [count=K] max-us=U [step-us=S] [timed]`: until K of the nodes
//!   (default all) delivered V in their current lives.
//! - `clock`: the scenario's time.
//! - `stabilize [max-us=U] [quiet-us=Q]`: rounds until nothing but heartbeats happened for
//!   Q (default 1 s), at most U (default 10 s).
//! - `deliver-msgs [from=] [to=] [kind=] [drop|hold|dup]`: the queued messages that match,
//!   and what they cause, until none matches; by the standing rules unless a fate is given.
//! - `rule deliver|drop|hold|dup [from=] [to=] [kind=] [instance=] [value=] [both]`: a
//!   standing network rule (first match wins) for messages from a node of `from` to a node
//!   of `to` (and, with `both`, from `to` to `from`: `rule drop from=0,1 to=3,4 both` cuts
//!   the four links between the two sets both ways); `partition nodes=I,.. [oneway=out|in]`
//!   cuts a set off; `heal` removes every rule and partition.
//! - `held`, `release-held [from=] [to=] [kind=] [n=]`: messages kept back, and handing
//!   them over (whatever the rules say now).
//! - `stop node=` / `resume node=`: freeze a node and cut it off, then thaw it (state kept).
//!   `crash node=`: gone, state and all. `restart node= amnesic|fresh [incarnation=]
//!   [from-snapshot]`: a new life on an empty in-memory store.
//! - `reconfigure node=I voters=A,B,.. [learners=C,..]`: asks node I for a new
//!   configuration (`Protocol::reconfigure`).
//! - `snapshot node= [app=]`: the learner snapshots (the app state is its delivered values).
//! - `status [node=]`, `delivered [node=] [instances]`, `held`.
//! - `check`: agreement, order, no duplicates, integrity, snapshots, convergence.
//! - `sent [from=] [to=] [kind=] [by-kind]`: messages sent since `mark` (per value with
//!   `by-kind`); `mark` resets the counts.
//! - `ballots node= kind=`: the ballots a node sent in messages of a kind, per life, and
//!   whether a later life reused or undercut one of an earlier life.

pub mod adapter;
pub mod datadriven;
pub mod env;
pub mod multiring;
pub mod raft;
mod ring;
pub mod ringpaxos;
pub mod seqpaxos;
pub mod token;
pub mod uring;

pub use adapter::{Adapter, Args, MsgInfo};
pub use datadriven::{FileReport, StepResult};
pub use env::{Cluster, Env, Level};

use std::path::{Path, PathBuf};

/// A cluster of the protocol `protocol=` names: the one place that lists the adapters.
pub fn new_cluster(args: &mut Args) -> Result<Box<dyn Cluster>, String> {
    let protocol: String = args.req("protocol")?;
    fn make<A: Adapter>(args: &mut Args) -> Result<Box<dyn Cluster>, String> {
        let ad = A::configure(args)?;
        args.done()?;
        Ok(Box::new(Env::new(ad)?))
    }
    match protocol.as_str() {
        uring::URingAdapter::NAME => make::<uring::URingAdapter>(args),
        ringpaxos::RingPaxosAdapter::NAME => make::<ringpaxos::RingPaxosAdapter>(args),
        multiring::MultiRingAdapter::NAME => make::<multiring::MultiRingAdapter>(args),
        raft::RaftAdapter::NAME => make::<raft::RaftAdapter>(args),
        seqpaxos::SeqPaxosAdapter::NAME => make::<seqpaxos::SeqPaxosAdapter>(args),
        token::TokenAdapter::NAME => make::<token::TokenAdapter>(args),
        p => Err(format!(
            "unknown protocol {p:?} (uring, ringpaxos, multiring, raft, seqpaxos, token)"
        )),
    }
}

/// Runs one scenario file (rewriting its outputs with `rewrite`).
pub fn run_file(path: &Path, rewrite: bool) -> Result<FileReport, String> {
    let mut cluster: Option<Box<dyn Cluster>> = None;
    datadriven::run_file(path, rewrite, |case| {
        let mut args = Args::new(&case.args);
        let r = match case.cmd.as_str() {
            "cluster" => new_cluster(&mut args).map(|c| {
                cluster = Some(c);
                String::new()
            }),
            "needs" => match args.flag("mutations") {
                Ok(true) if !abcast_core::mutation::AVAILABLE => {
                    return StepResult::Skip("needs the `mutations` feature of abcast-core".into());
                }
                Ok(true) => args.done().map(|()| String::new()),
                Ok(false) => Err("needs what? (needs mutations)".into()),
                Err(e) => Err(e),
            },
            cmd => match cluster.as_mut() {
                None => Err("no cluster yet: start with `cluster protocol=...`".into()),
                Some(c) => c.exec(cmd, &mut args),
            },
        };
        StepResult::Output(match r {
            Ok(s) => s,
            Err(e) => format!("error: {e}"),
        })
    })
}

/// Every `*.txt` under `dir`, sorted.
pub fn scenario_files(dir: &Path) -> Result<Vec<PathBuf>, String> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        let entries = std::fs::read_dir(&d).map_err(|e| format!("{}: {e}", d.display()))?;
        for e in entries {
            let p = e.map_err(|e| e.to_string())?.path();
            if p.is_dir() {
                todo.push(p);
            } else if p.extension().is_some_and(|x| x == "txt") {
                out.push(p);
            }
        }
    }
    out.sort();
    Ok(out)
}
