//! The `abcast` command: one binary for the node daemon, its clients, the demo and the
//! benchmarks, so a demo or benchmark always runs the very node code it was built with.
//!
//! Exit status: 0 success, 1 runtime failure (or a demo/benchmark whose checks failed),
//! 2 bad input. Errors print as `error: ...` on stderr.

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser, Debug)]
#[command(
    name = "abcast",
    version,
    about = "Total-order (atomic) broadcast: every learner delivers the same values in the \
             same order, despite crashes and restarts.",
    long_about = "Total-order (atomic) broadcast: every learner delivers the same values in \
                  the same order, despite message loss, crashes and restarts.\n\n\
                  Quick start: `abcast demo` runs a 3-node cluster on this machine for 10 s \
                  and prints throughput, latency and an agreement check."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run one cluster node from a TOML config file.
    ///
    /// The node is proposer, acceptor and learner as its config says. With --json-stats it
    /// prints one JSON stats line per period on stdout (docs/CONTRACTS.md).
    Node(abcast_node::node::NodeArgs),
    /// Send values to a running node.
    ///
    /// Each value is acknowledged once the ring has ordered it.
    Propose(abcast_node::client::ProposeArgs),
    /// Print the values a running node delivers, in delivery order.
    Learn(abcast_node::client::LearnArgs),
    /// Make a Multi-Ring node's learner start or stop following a ring.
    ///
    /// The change is a control value decided in that ring, so every learner agrees on the
    /// point where this learner's delivery of the ring starts or stops.
    Follow(abcast_node::client::FollowArgs),
    /// Show a node's view: the leader, the configuration (and a change under way), each
    /// follower's progress as the leader sees it, and this node's delivered index.
    Status(abcast_node::client::StatusArgs),
    /// Move a Sequence Paxos or Raft cluster to a new configuration, and wait until it is
    /// in effect.
    ///
    /// Any node may be asked: one that is not the leader names the leader, which is asked
    /// instead. New members must be running (started as spares: `spare = true` in the
    /// config file). Replacing the leader is allowed.
    Reconfigure(abcast_node::client::ReconfigureArgs),
    /// A linearizable-read barrier at a node (read index): prints the read point.
    ///
    /// Once the node has applied every instance up to the read point (it has when this
    /// returns), a read of its state is linearizable. Sequence Paxos and Raft answer at
    /// the leader; other protocols order the read through the log.
    Read(abcast_node::client::ReadArgs),
    /// Make a member of a process group (token ring): it stays until `abcast leave`.
    ///
    /// The join is a value of the total order; every member of the configuration sees the
    /// group's new view at the same place among the group's messages.
    Join(abcast_node::groups::MembershipArgs),
    /// Take a member out of a process group (token ring).
    Leave(abcast_node::groups::MembershipArgs),
    /// Send messages to a process group (token ring), Agreed or Safe.
    ///
    /// With --count or --duration, a load generator that prints the rate it reached.
    Multicast(abcast_node::groups::MulticastArgs),
    /// Print a process group's views (membership changes) and messages as a node delivers
    /// them; with --member, as a member of the group while it listens.
    Listen(abcast_node::groups::ListenArgs),
    /// List the process groups a node knows, with their members.
    Groups(abcast_node::groups::GroupsArgs),
    /// Run a local cluster under load and report on it.
    ///
    /// Starts N node processes on 127.0.0.1, loads them, then prints throughput, latency,
    /// CPU and memory, and checks that all learners delivered the same values in the same
    /// order. With --kill, it crashes and restarts nodes mid-run and checks that nothing
    /// acknowledged was lost or delivered twice. Exit status 0 only if every check passed.
    Demo(abcast_harness::demo::DemoArgs),
    /// Reproduce a seed paper's figure on this machine.
    ///
    /// Runs real node processes for each point of a sweep, several times, and writes
    /// results.csv, plot.png and summary.md into the output directory.
    /// `abcast bench --list` names the experiments.
    Bench(abcast_harness::bench::BenchArgs),
    /// Run real node processes under a seeded nemesis and check they keep their promises.
    ///
    /// Each node in a network namespace of its own, clients proposing, delivery logs
    /// recording, while the nemesis applies kill -9 (the coordinator too), kill -9 of every
    /// node at once (durable storage), SIGSTOP pauses, partitions and one-way cuts (nft) and
    /// restarts on a wiped directory; then checks agreement, no duplicate, no phantom, no
    /// lost acknowledged value and liveness. Needs root. A failing run prints its seed and
    /// the command that replays it; exit status 0 only if every check passed.
    Chaos(abcast_harness::chaos::ChaosArgs),
}

fn fail(code: u8, message: impl std::fmt::Display) -> ExitCode {
    eprintln!("error: {message}");
    ExitCode::from(code)
}

/// The node daemon keeps its freed memory: glibc's malloc returns a large block to the
/// kernel at once (blocks from 128 KiB are mmap'd, and a free heap top past 128 KiB is
/// trimmed), and the next batch of the same size then pays a page fault per 4 KiB, the
/// kernel zeroing every page. A node allocates batch and frame buffers of 64 KiB to 1 MiB
/// all the time: at 16-byte values the faults were a tenth of a leader's time (profile in
/// docs/benchmarks/leader/README.md). The thresholds here keep blocks up to 32 MiB in the
/// heap and up to 256 MiB of free heap top mapped. A program that embeds a node chooses
/// its own allocator; this is the `abcast node` process (and `abcast multicast` and
/// `listen`, whose message buffers churn the same way) only.
fn keep_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `mallopt` only sets malloc parameters; it is called before this process
    // starts any other thread.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 256 << 20);
    }
}

fn main() -> ExitCode {
    // clap prints `error: ...` with usage and exits 2 on bad input; --help and --version
    // exit 0.
    let cli = Cli::parse();
    if matches!(
        cli.command,
        Command::Node(_) | Command::Multicast(_) | Command::Listen(_)
    ) {
        // The node, and the group clients that stream messages at it.
        keep_freed_memory();
    }
    match cli.command {
        Command::Node(args) => match abcast_node::node::run_node(args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => fail(1, e),
        },
        Command::Propose(args) => match abcast_node::client::run_propose(args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => fail(1, e),
        },
        Command::Learn(args) => match abcast_node::client::run_learn(args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => fail(1, e),
        },
        Command::Follow(args) => match abcast_node::client::run_follow(args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => fail(1, e),
        },
        Command::Status(args) => match abcast_node::client::run_status(args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => fail(e.exit_code(), e),
        },
        Command::Reconfigure(args) => match abcast_node::client::run_reconfigure(args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => fail(e.exit_code(), e),
        },
        Command::Read(args) => match abcast_node::client::run_read(args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => fail(e.exit_code(), e),
        },
        Command::Join(args) => match abcast_node::groups::run_join(args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => fail(e.exit_code(), e),
        },
        Command::Leave(args) => match abcast_node::groups::run_leave(args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => fail(e.exit_code(), e),
        },
        Command::Multicast(args) => match abcast_node::groups::run_multicast(args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => fail(e.exit_code(), e),
        },
        Command::Listen(args) => match abcast_node::groups::run_listen(args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => fail(e.exit_code(), e),
        },
        Command::Groups(args) => match abcast_node::groups::run_groups(args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => fail(e.exit_code(), e),
        },
        Command::Demo(args) => match abcast_harness::demo::run_demo(&args) {
            Ok(code) => ExitCode::from(code),
            Err(e) => fail(e.exit_code(), e),
        },
        Command::Bench(args) => match abcast_harness::bench::run_bench(&args) {
            Ok(code) => ExitCode::from(code),
            Err(e) => fail(e.exit_code(), e),
        },
        Command::Chaos(args) => match abcast_harness::chaos::run_chaos_cmd(&args) {
            Ok(code) => ExitCode::from(code),
            Err(e) => fail(e.exit_code(), e),
        },
    }
}
