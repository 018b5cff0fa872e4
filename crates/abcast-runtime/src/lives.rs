//! Which process lives of its peers a node has taken frames from, kept on disk, and the
//! question a node with an empty directory asks them before it starts: "which incarnation
//! of me do you know?" (issue 33, suspect 2; docs/design/amnesia-detection.md).
//!
//! A node keeps its incarnation in a marker file of its directory; every restart bumps it,
//! and a restart of an acceptor that lost its state is amnesic (`StartInfo::amnesic`), so
//! the protocols do not count its forgotten promises and votes until it is repaired. A
//! wiped directory loses the marker too: the node would start as a new member, at
//! incarnation 0, and vote with empty state, its earlier votes silently gone, and reuse
//! the ballots and value ids of its first life. Only its peers can tell it otherwise:
//!
//! * **The book** ([`LivesBook`], file `peer-lives` in the node's directory): per peer, the
//!   highest incarnation a `Hello` of it announced. The TCP transport writes it, durably,
//!   before it takes any frame of a life it has not seen (once per peer restart).
//! * **The question** ([`probe`]): a node whose directory has no marker asks every other
//!   member on its peer port (a [`KIND_LIFE_QUERY`] frame instead of a `Hello`), and each
//!   answers from its book ([`KIND_LIFE_ANSWER`]) and closes. Every member saying "never"
//!   means no member ever took a frame of an earlier life: the node is new, and starts at
//!   incarnation 0. Any member naming an incarnation means the node lived before: it starts
//!   amnesic at one past the highest named. It waits for every other member's answer (a
//!   member that does not answer may be the one that took its frames), meanwhile answering
//!   the others' questions itself ("never": it has no book yet), so that a whole new
//!   cluster starts at once.

use crate::frame::{self, FrameError};
use abcast_core::NodeId;
use abcast_core::codec::{Decoder, Encoder};
use bytes::{Bytes, BytesMut};
use std::collections::BTreeMap;
use std::fs;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// First frame of a peer-port connection that asks which life of the asker the node knows
/// (in place of a `Hello`): cluster_id u64, node u32.
pub const KIND_LIFE_QUERY: u8 = 250;
/// The answer, then the node closes the connection: status u8 (0 never seen, 1 seen,
/// 2 keeps no book), incarnation u64.
pub const KIND_LIFE_ANSWER: u8 = 251;

/// The file of the book in a node's directory.
pub const BOOK_FILE: &str = "peer-lives";
/// Peers a book holds at most (the transport's peer slots).
const BOOK_PEERS_MAX: usize = 1024;

/// The highest incarnation of each peer whose frames this node took, on disk.
#[derive(Debug)]
pub struct LivesBook {
    path: PathBuf,
    lives: BTreeMap<NodeId, u64>,
}

/// One book for every transport of a node: the TCP links record a life at its `Hello`,
/// the datagram endpoints at its first datagram (`transport/datagram.rs`), since a life
/// whose frames reached the peers only as UDP datagrams (the token ring, Ring Paxos'
/// multicast) is a life too. The event loop is its only user: the lock is never contended.
pub type SharedLivesBook = std::sync::Arc<std::sync::Mutex<LivesBook>>;

impl LivesBook {
    /// The book, to share between the transports of one node.
    pub fn shared(self) -> SharedLivesBook {
        std::sync::Arc::new(std::sync::Mutex::new(self))
    }
}

impl LivesBook {
    /// Reads the book at `path` (none yet: empty). A damaged book is an error: the node
    /// could answer "never" for a peer it took frames from.
    pub fn open(path: &Path) -> io::Result<LivesBook> {
        let mut lives = BTreeMap::new();
        match fs::read_to_string(path) {
            Ok(text) => {
                for (n, line) in text.lines().enumerate() {
                    let bad = || {
                        io::Error::new(
                            io::ErrorKind::InvalidData,
                            format!(
                                "{}: line {}: {line:?} is not `node incarnation`",
                                path.display(),
                                n + 1
                            ),
                        )
                    };
                    let mut w = line.split_whitespace();
                    let (Some(node), Some(inc), None) = (w.next(), w.next(), w.next()) else {
                        return Err(bad());
                    };
                    let node: u32 = node.parse().map_err(|_| bad())?;
                    let inc: u64 = inc.parse().map_err(|_| bad())?;
                    if lives.len() >= BOOK_PEERS_MAX {
                        return Err(bad());
                    }
                    lives.insert(NodeId(node), inc);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        Ok(LivesBook {
            path: path.to_path_buf(),
            lives,
        })
    }

    /// The highest incarnation of `node` this node took frames from.
    pub fn get(&self, node: NodeId) -> Option<u64> {
        self.lives.get(&node).copied()
    }

    /// `node` announced `incarnation`: recorded, durably, before the caller takes a frame
    /// of it, if it is new or higher than the book's.
    pub fn note(&mut self, node: NodeId, incarnation: u64) -> io::Result<()> {
        if self.get(node).is_some_and(|k| k >= incarnation) {
            return Ok(());
        }
        if !self.lives.contains_key(&node) && self.lives.len() >= BOOK_PEERS_MAX {
            return Err(io::Error::other("the book of peer lives is full"));
        }
        let before = self.lives.insert(node, incarnation);
        if let Err(e) = self.write() {
            match before {
                Some(k) => self.lives.insert(node, k),
                None => self.lives.remove(&node),
            };
            return Err(e);
        }
        Ok(())
    }

    /// The whole book, atomically: a temporary file, fsync, rename, directory fsync.
    fn write(&self) -> io::Result<()> {
        let mut text = String::new();
        for (n, k) in &self.lives {
            text.push_str(&format!("{} {k}\n", n.0));
        }
        let tmp = self.path.with_extension("tmp");
        {
            let mut f = fs::File::create(&tmp)?;
            f.write_all(text.as_bytes())?;
            f.sync_all()?;
        }
        fs::rename(&tmp, &self.path)?;
        if let Some(dir) = self.path.parent() {
            fs::File::open(dir)?.sync_all()?;
        }
        Ok(())
    }
}

/// What a member knows of the asker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LifeAnswer {
    /// It never took a frame of the asker.
    Never,
    /// It took frames of the asker's lives up to this incarnation.
    Seen(u64),
    /// It keeps no book (an embedder's driver without a directory): it cannot tell.
    NoBook,
}

impl LifeAnswer {
    /// The answer a node with `book` gives about `node`.
    pub fn from_book(book: Option<&LivesBook>, node: NodeId) -> LifeAnswer {
        match book {
            None => LifeAnswer::NoBook,
            Some(b) => b.get(node).map_or(LifeAnswer::Never, LifeAnswer::Seen),
        }
    }

    /// The answer frame, whole.
    pub fn frame(self) -> Result<Bytes, FrameError> {
        let mut e = Encoder::new();
        let (status, inc) = match self {
            LifeAnswer::Never => (0, 0),
            LifeAnswer::Seen(k) => (1, k),
            LifeAnswer::NoBook => (2, 0),
        };
        e.put_u8(status);
        e.put_u64(inc);
        frame::encode_to_bytes(KIND_LIFE_ANSWER, 0, &[e.to_bytes()])
    }

    pub fn decode(body: Bytes) -> Result<LifeAnswer, String> {
        let mut d = Decoder::new(body);
        let status = d.u8("life answer status").map_err(|e| e.to_string())?;
        let inc = d
            .u64("life answer incarnation")
            .map_err(|e| e.to_string())?;
        d.finish().map_err(|e| e.to_string())?;
        match status {
            0 => Ok(LifeAnswer::Never),
            1 => Ok(LifeAnswer::Seen(inc)),
            2 => Ok(LifeAnswer::NoBook),
            s => Err(format!("life answer status {s}")),
        }
    }
}

/// The question's frame: which life of `node` of cluster `cluster_id` do you know?
pub fn query_frame(cluster_id: u64, node: NodeId) -> Result<Bytes, FrameError> {
    let mut e = Encoder::new();
    e.put_u64(cluster_id);
    e.put_u32(node.0);
    frame::encode_to_bytes(KIND_LIFE_QUERY, 0, &[e.to_bytes()])
}

/// Decodes a question's body: (cluster_id, node).
pub fn decode_query(body: Bytes) -> Result<(u64, NodeId), String> {
    let mut d = Decoder::new(body);
    let cluster = d.u64("life query cluster_id").map_err(|e| e.to_string())?;
    let node = NodeId(d.u32("life query node").map_err(|e| e.to_string())?);
    d.finish().map_err(|e| e.to_string())?;
    Ok((cluster, node))
}

/// What the members said ([`probe`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeOutcome {
    /// The highest incarnation of the asker any member named; `None`: every member said
    /// "never".
    pub known: Option<u64>,
    /// Each member's answer.
    pub answers: Vec<(NodeId, LifeAnswer)>,
}

/// How long one attempt to reach a member may take.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(2);
/// Between two rounds over the members that have not answered yet.
const ROUND_PAUSE: Duration = Duration::from_millis(200);
/// Between two "still waiting" log lines.
const WAIT_LOG_EVERY: Duration = Duration::from_secs(5);

/// Asks every member of `peers` (other than `me`) which life of `me` it knows, until each
/// answered (see the module comment), while answering the same question from the others
/// on `listener` ("never": this node keeps no book yet) and closing any other connection
/// (they reconnect once this node runs). Stops with `ErrorKind::Interrupted` when `stop` is
/// set. `log` gets a line now and then while it waits.
pub fn probe(
    cluster_id: u64,
    me: NodeId,
    peers: &[(NodeId, SocketAddr)],
    listener: &TcpListener,
    stop: &AtomicBool,
    log: &dyn Fn(&str),
) -> io::Result<ProbeOutcome> {
    let serving = Arc::new(AtomicBool::new(true));
    let server = {
        let l = listener.try_clone()?;
        l.set_nonblocking(true)?;
        let serving = Arc::clone(&serving);
        std::thread::Builder::new()
            .name("life-probe".into())
            .spawn(move || serve_while_probing(&l, cluster_id, &serving))?
    };
    let result = ask_all(cluster_id, me, peers, stop, log);
    serving.store(false, Ordering::Relaxed);
    let _ = server.join();
    listener.set_nonblocking(false)?;
    result
}

fn ask_all(
    cluster_id: u64,
    me: NodeId,
    peers: &[(NodeId, SocketAddr)],
    stop: &AtomicBool,
    log: &dyn Fn(&str),
) -> io::Result<ProbeOutcome> {
    let mut waiting: Vec<(NodeId, SocketAddr)> = Vec::new();
    for &(n, a) in peers {
        if n != me && !waiting.iter().any(|(m, _)| *m == n) {
            waiting.push((n, a));
        }
    }
    let mut answers = Vec::new();
    let mut last_log = Instant::now();
    let mut why: BTreeMap<NodeId, String> = BTreeMap::new();
    while !waiting.is_empty() {
        if stop.load(Ordering::Relaxed) {
            return Err(io::Error::new(
                io::ErrorKind::Interrupted,
                "stopped while asking the peers which life of this node they know",
            ));
        }
        waiting.retain(|&(n, addr)| match ask(cluster_id, me, addr) {
            Ok(LifeAnswer::NoBook) => {
                why.insert(n, "keeps no book of peer lives".into());
                true
            }
            Ok(a) => {
                answers.push((n, a));
                false
            }
            Err(e) => {
                why.insert(n, e.to_string());
                true
            }
        });
        if waiting.is_empty() {
            break;
        }
        if last_log.elapsed() >= WAIT_LOG_EVERY {
            last_log = Instant::now();
            let list: Vec<String> = waiting
                .iter()
                .map(|(n, a)| {
                    format!(
                        "{n} at {a} ({})",
                        why.get(n).map_or("no answer yet", String::as_str)
                    )
                })
                .collect();
            log(&format!(
                "this node's directory has no incarnation marker: waiting for every other \
                 member to say whether it knew an earlier life of it (still {}); pass \
                 --first-start if this node never ran before",
                list.join(", ")
            ));
        }
        std::thread::sleep(ROUND_PAUSE);
    }
    let known = answers
        .iter()
        .filter_map(|(_, a)| match a {
            LifeAnswer::Seen(k) => Some(*k),
            _ => None,
        })
        .max();
    Ok(ProbeOutcome { known, answers })
}

/// One question to the member at `addr`.
fn ask(cluster_id: u64, me: NodeId, addr: SocketAddr) -> io::Result<LifeAnswer> {
    let mut s = TcpStream::connect_timeout(&addr, ATTEMPT_TIMEOUT)?;
    s.set_read_timeout(Some(ATTEMPT_TIMEOUT))?;
    s.set_write_timeout(Some(ATTEMPT_TIMEOUT))?;
    let q = query_frame(cluster_id, me).map_err(|e| io::Error::other(e.to_string()))?;
    s.write_all(&q)?;
    let f = read_frame(&mut s)?;
    if f.kind != KIND_LIFE_ANSWER {
        return Err(io::Error::other(format!(
            "answered with a frame of kind {}",
            f.kind
        )));
    }
    LifeAnswer::decode(f.body).map_err(io::Error::other)
}

/// Reads one small frame (at most 256 bytes of body) from a blocking stream.
fn read_frame(s: &mut TcpStream) -> io::Result<frame::Frame> {
    let mut buf = BytesMut::with_capacity(frame::HEADER_BYTES + 64);
    let mut chunk = [0u8; 512];
    loop {
        match frame::decode(&mut buf) {
            Ok(Some(f)) => return Ok(f),
            Ok(None) => {}
            Err(e) => return Err(io::Error::other(e.to_string())),
        }
        if buf.len() > frame::HEADER_BYTES + 256 {
            return Err(io::Error::other("answer frame too long"));
        }
        let n = s.read(&mut chunk)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "closed before answering",
            ));
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// The probing node's side: answers "never" to each question of its cluster (it keeps no
/// book yet: its directory is empty) and closes every connection.
fn serve_while_probing(listener: &TcpListener, cluster_id: u64, serving: &AtomicBool) {
    while serving.load(Ordering::Relaxed) {
        match listener.accept() {
            Ok((mut s, _)) => {
                let _ = s.set_nonblocking(false);
                let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
                let _ = s.set_write_timeout(Some(Duration::from_millis(500)));
                if let Ok(f) = read_frame(&mut s)
                    && f.kind == KIND_LIFE_QUERY
                    && decode_query(f.body).is_ok_and(|(c, _)| c == cluster_id)
                    && let Ok(a) = LifeAnswer::Never.frame()
                {
                    let _ = s.write_all(&a);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("abcast-lives-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn the_book_keeps_the_highest_incarnation_per_peer_across_reopens() {
        let d = temp("book");
        let path = d.join(BOOK_FILE);
        let mut b = LivesBook::open(&path).unwrap();
        assert_eq!(b.get(NodeId(1)), None);
        b.note(NodeId(1), 3).unwrap();
        b.note(NodeId(1), 2).unwrap();
        b.note(NodeId(2), 0).unwrap();
        let b = LivesBook::open(&path).unwrap();
        assert_eq!(b.get(NodeId(1)), Some(3));
        assert_eq!(b.get(NodeId(2)), Some(0));
        assert_eq!(
            LifeAnswer::from_book(Some(&b), NodeId(9)),
            LifeAnswer::Never
        );
        assert_eq!(LifeAnswer::from_book(None, NodeId(1)), LifeAnswer::NoBook);
        fs::write(&path, "1 x\n").unwrap();
        assert!(LivesBook::open(&path).is_err(), "a damaged book is refused");
        let _ = fs::remove_dir_all(&d);
    }

    #[test]
    fn frames_round_trip() {
        for a in [LifeAnswer::Never, LifeAnswer::Seen(7), LifeAnswer::NoBook] {
            let mut buf = BytesMut::from(&a.frame().unwrap()[..]);
            let f = frame::decode(&mut buf).unwrap().unwrap();
            assert_eq!(f.kind, KIND_LIFE_ANSWER);
            assert_eq!(LifeAnswer::decode(f.body), Ok(a));
        }
        let mut buf = BytesMut::from(&query_frame(5, NodeId(2)).unwrap()[..]);
        let f = frame::decode(&mut buf).unwrap().unwrap();
        assert_eq!(decode_query(f.body), Ok((5, NodeId(2))));
    }

    /// A whole new cluster: every node asks while the others ask too, each answers
    /// "never", and all of them start new.
    #[test]
    fn a_new_cluster_probing_at_once_starts_new_everywhere() {
        let listeners: Vec<TcpListener> = (0..3)
            .map(|_| TcpListener::bind("127.0.0.1:0").unwrap())
            .collect();
        let peers: Vec<(NodeId, SocketAddr)> = listeners
            .iter()
            .enumerate()
            .map(|(i, l)| (NodeId(i as u32), l.local_addr().unwrap()))
            .collect();
        let stop = AtomicBool::new(false);
        let finished = std::sync::atomic::AtomicUsize::new(0);
        let outcomes: Vec<ProbeOutcome> = std::thread::scope(|s| {
            let handles: Vec<_> = listeners
                .iter()
                .enumerate()
                .map(|(i, l)| {
                    let peers = &peers;
                    let stop = &stop;
                    let finished = &finished;
                    s.spawn(move || {
                        let o = probe(4, NodeId(i as u32), peers, l, stop, &|_| {});
                        finished.fetch_add(1, Ordering::SeqCst);
                        // A started node's transport answers the others from here on
                        // (`tcp.rs`, `answer_life_query`); without it a probe that ended
                        // first would leave a slower one waiting for ever.
                        l.set_nonblocking(true).unwrap();
                        let serving = AtomicBool::new(true);
                        std::thread::scope(|s2| {
                            s2.spawn(|| serve_while_probing(l, 4, &serving));
                            while finished.load(Ordering::SeqCst) < 3 {
                                std::thread::sleep(Duration::from_millis(10));
                            }
                            serving.store(false, Ordering::SeqCst);
                        });
                        o
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap().unwrap())
                .collect()
        });
        for o in outcomes {
            assert_eq!(o.known, None, "{o:?}");
            assert_eq!(o.answers.len(), 2);
        }
    }
}
