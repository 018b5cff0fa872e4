//! Process groups (issue 18) on real sockets: three `abcast node`s of a token ring, clients
//! that join, leave, multicast and listen through the client port. Every listener, at
//! every node, is told the same views and the same messages in the same order; a member
//! bound to a connection leaves when it closes; bad requests get an error or, malformed,
//! close only their own connection.

mod token_support;

use abcast_core::groups::Member;
use abcast_core::{DeliveryLevel, NodeId};
use abcast_node::client::{Client, ClientError};
use abcast_node::groups::{GroupEventFrame, GroupSend};
use abcast_runtime::clientwire::ClientFrame;
use bytes::Bytes;
use std::time::{Duration, Instant};
use token_support::*;

fn ring(name: &str) -> (std::path::PathBuf, Vec<Node>) {
    ring_with(name, "process_groups = true\n")
}

fn ring_with(name: &str, token: &str) -> (std::path::PathBuf, Vec<Node>) {
    let dir = temp_dir(name);
    let peers: Vec<u16> = (0..3).map(|_| free_peer_port()).collect();
    let clients: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let path = dir.join("cluster.toml");
    std::fs::write(&path, token_config(&peers, &clients, token)).unwrap();
    let nodes = start(&path, &peers, &clients, 3);
    wait_for_the_whole_ring(&nodes);
    (dir, nodes)
}

fn names(ms: &[Member]) -> String {
    ms.iter()
        .map(|m| m.to_string())
        .collect::<Vec<_>>()
        .join(" ")
}

/// One line per view or message a listener is told.
fn lines_of(ev: GroupEventFrame) -> Vec<String> {
    match ev {
        GroupEventFrame::View(v) => vec![format!(
            "view {} {} {:?} [{}]",
            v.group,
            v.id,
            v.kind,
            names(&v.members)
        )],
        GroupEventFrame::Messages(b) => b
            .payloads
            .iter()
            .map(|p| {
                format!(
                    "msg {} {} {:?} {} {}",
                    b.group,
                    b.view,
                    b.level,
                    b.sender,
                    String::from_utf8_lossy(p)
                )
            })
            .collect(),
    }
}

/// Reads a listener's events until `done` holds for the last line.
fn listen_until(l: &mut Client, done: impl Fn(&str) -> bool) -> Vec<String> {
    let end = Instant::now() + PATIENCE;
    let mut got = Vec::new();
    loop {
        assert!(Instant::now() < end, "listener stuck after {got:#?}");
        let ev = l.next_group_event(Some(PATIENCE)).unwrap();
        for line in lines_of(ev) {
            let stop = done(&line);
            got.push(line);
            if stop {
                return got;
            }
        }
    }
}

fn to(group: &str, sender: &str, level: DeliveryLevel) -> GroupSend {
    GroupSend {
        group: group.into(),
        sender: sender.into(),
        level,
        window: 64,
        stall_max: PATIENCE,
    }
}

/// Waits until `c`'s own node counts `name` among `group`'s members. Each node delivers
/// a join in its own time, and a node refuses a sender it does not yet know as a member,
/// so seeing the join at another node's listener is not enough to send.
fn until_member(c: &mut Client, group: &str, name: &str) {
    let end = Instant::now() + PATIENCE;
    loop {
        let groups = c.groups(PATIENCE).unwrap();
        if groups
            .iter()
            .any(|(g, ms)| g == group && ms.iter().any(|m| m.name == name))
        {
            return;
        }
        assert!(
            Instant::now() < end,
            "{name} never joined {group}: {groups:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn multicast(c: &mut Client, group: &str, sender: &str, level: DeliveryLevel, msgs: &[&str]) {
    let mut it = msgs.iter().map(|m| Bytes::from(m.to_string()));
    let sent = c
        .group_multicast_stream(&to(group, sender, level), || it.next(), |_| {})
        .unwrap();
    assert_eq!(sent, msgs.len() as u64);
}

#[test]
fn every_listener_is_told_the_same_views_and_messages_in_the_same_order() {
    let (dir, nodes) = ring("groups-story");
    let t = PATIENCE;
    let mut listeners: Vec<Client> = nodes.iter().map(|n| connect(n.client)).collect();
    for l in &mut listeners {
        l.group_listen("orders", t).unwrap();
    }
    // alice joins at node 1 (she stays until she leaves); bob at node 2, bound to his
    // connection.
    let mut c1 = connect(nodes[1].client);
    c1.group_join("orders", "alice", false, t).unwrap();
    let mut bob = connect(nodes[2].client);
    bob.group_join("orders", "bob", true, t).unwrap();
    // Wait until node 0's listener sees both, so the messages below come after.
    let mut seen0 = listen_until(&mut listeners[0], |l| l.contains("alice@n1 bob@n2"));
    // A sender that is not a member, Agreed; alice, Safe.
    until_member(&mut c1, "orders", "alice");
    until_member(&mut c1, "orders", "bob");
    let mut c0 = connect(nodes[0].client);
    multicast(
        &mut c0,
        "orders",
        "",
        DeliveryLevel::Agreed,
        &["a1", "a2", "a3"],
    );
    multicast(
        &mut c1,
        "orders",
        "alice",
        DeliveryLevel::Safe,
        &["s1", "s2"],
    );
    // bob's connection closes: he leaves; then alice leaves.
    drop(bob);
    seen0.extend(listen_until(&mut listeners[0], |l| {
        l.starts_with("view") && !l.contains("bob")
    }));
    c1.group_leave("orders", "alice", t).unwrap();
    seen0.extend(listen_until(&mut listeners[0], |l| l.ends_with("[]")));
    let mut told = vec![seen0];
    for l in listeners.iter_mut().skip(1) {
        told.push(listen_until(l, |l| l.ends_with("[]")));
    }
    for (i, t) in told.iter().enumerate().skip(1) {
        assert_eq!(t, &told[0], "listener at node {i} was told another story");
    }
    let story = &told[0];
    let views: Vec<&String> = story.iter().filter(|l| l.starts_with("view")).collect();
    assert!(
        views[0].contains("[alice@n1]") || views[0].contains("[bob@n2]"),
        "{story:#?}"
    );
    assert!(
        views.iter().any(|v| v.ends_with("[alice@n1 bob@n2]")),
        "{story:#?}"
    );
    assert!(
        views.iter().any(|v| v.ends_with("[alice@n1]")),
        "bob left: {story:#?}"
    );
    assert!(views.last().unwrap().ends_with("[]"), "{story:#?}");
    let msgs: Vec<&String> = story.iter().filter(|l| l.starts_with("msg")).collect();
    assert_eq!(msgs.len(), 5, "{story:#?}");
    assert!(msgs[0].contains("Agreed (non-member)@n0 a1"), "{}", msgs[0]);
    assert!(msgs[3].contains("Safe alice@n1 s1"), "{}", msgs[3]);
    // Every message came in the view with both members.
    let both = story
        .iter()
        .position(|l| l.ends_with("[alice@n1 bob@n2]"))
        .unwrap();
    let first_msg = story.iter().position(|l| l.starts_with("msg")).unwrap();
    assert!(both < first_msg);
    // The node's list agrees: nobody is left.
    assert!(c0.groups(t).unwrap().is_empty());
    for n in nodes {
        n.stop();
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn group_requests_are_checked_and_a_malformed_one_closes_only_its_connection() {
    let (dir, nodes) = ring("groups-bad");
    let t = PATIENCE;
    let mut c = connect(nodes[0].client);
    let refused = |r: Result<(), ClientError>, needle: &str| match r {
        Err(ClientError::Refused(text)) => assert!(text.contains(needle), "{text}"),
        other => panic!("expected a refusal naming {needle:?}, got {other:?}"),
    };
    refused(c.group_leave("g", "nobody", t), "not a member");
    let mut it = std::iter::once(Bytes::from_static(b"x"));
    match c.group_multicast_stream(
        &to("g", "ghost", DeliveryLevel::Agreed),
        || it.next(),
        |_| {},
    ) {
        Err(ClientError::Refused(text)) => assert!(text.contains("join first"), "{text}"),
        other => panic!("a non-member sending under a member's name: {other:?}"),
    }
    c.group_join("g", "m", false, t).unwrap();
    // The join is in effect once delivered; asking again then is refused.
    let end = Instant::now() + t;
    loop {
        match c.group_join("g", "m", false, t) {
            Err(ClientError::Refused(text)) if text.contains("already a member") => break,
            Ok(()) | Err(ClientError::Refused(_)) => {}
            Err(e) => panic!("{e}"),
        }
        assert!(Instant::now() < end, "the join never took effect");
        std::thread::sleep(Duration::from_millis(20));
    }
    // A name with a space does not decode: that connection is closed, the node goes on.
    let mut bad = connect(nodes[0].client);
    bad.send(&ClientFrame::GroupJoin {
        group: "a b".into(),
        member: "m".into(),
        bound: false,
    })
    .unwrap();
    assert!(matches!(
        bad.recv(Some(t)),
        Err(ClientError::Closed) | Err(ClientError::Io(_))
    ));
    let groups = c.groups(t).unwrap();
    assert_eq!(groups.len(), 1);
    assert_eq!(groups[0].0, "g");
    for n in nodes {
        n.stop();
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_node_without_process_groups_says_how_to_turn_them_on() {
    let (dir, nodes) = ring_with("groups-off", "");
    let mut c = connect(nodes[0].client);
    match c.group_join("g", "m", false, PATIENCE) {
        Err(ClientError::Refused(text)) => {
            assert!(text.contains("process_groups = true"), "{text}")
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    for n in nodes {
        n.stop();
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Seed 002 §II's Safe delivery with a member deaf to data, on real sockets: node 2 loses
/// every data message sent to it (a `[[link_faults]]` rule on the data lane, which carries
/// the joins of a membership change too) while the token lane works. Node 2 hears no join
/// of anyone, so it refuses the commit tokens that would put it in a ring with nodes 0 and
/// 1 (`commit_refused_deaf`) and forms a ring of its own; a member that went deaf after a
/// ring formed would fail itself after `fail_to_recv_rotations` rotations (Totem's "failed
/// to receive" rule). Either way no member that lacks the messages holds the token's aru
/// down for good: a Safe message and an Agreed one are delivered at nodes 0 and 1 while
/// node 2 still runs. That a Safe message waits while a member of the ring lacks it, and
/// the failed-to-receive rule, are shown step by step in `abcast-core`'s token tests and
/// the simulator's `token/data_lane_cut.txt` story.
#[test]
fn a_member_deaf_to_data_is_left_out_and_safe_delivery_goes_on() {
    let dir = temp_dir("groups-safe");
    let peers: Vec<u16> = (0..3).map(|_| free_peer_port()).collect();
    let clients: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let path = dir.join("cluster.toml");
    let config = token_config(&peers, &clients, "process_groups = true\n")
        + "[[link_faults]]\nto = 2\nloss_ppm = 1000000\nlane = \"data\"\n";
    std::fs::write(&path, config).unwrap();
    let nodes = start(&path, &peers, &clients, 3);
    let t = PATIENCE;
    // Nodes 0 and 1 form a ring without node 2; node 2 one of its own.
    wait_for_rings(&nodes, &[0, 0, 2]);
    let mut listeners: Vec<Client> = nodes[..2].iter().map(|n| connect(n.client)).collect();
    for l in &mut listeners {
        l.group_listen("g", t).unwrap();
    }
    let mut c0 = connect(nodes[0].client);
    for (level, text) in [
        (DeliveryLevel::Agreed, "agreed"),
        (DeliveryLevel::Safe, "safe"),
    ] {
        c0.send(&ClientFrame::GroupMulticast {
            group: "g".into(),
            sender: String::new(),
            level,
            payloads: vec![Bytes::from(text.to_string())],
        })
        .unwrap();
        // Sent, then acknowledged (decided): node 2 holds nothing back.
        let (mut sent, mut decided) = (false, false);
        while !(sent && decided) {
            match c0.recv(Some(t)) {
                Ok(ClientFrame::GroupSent { .. }) => sent = true,
                Ok(ClientFrame::Decided { .. }) => decided = true,
                other => panic!("{text}: {other:?}"),
            }
        }
        for l in &mut listeners {
            let got = listen_until(l, |line| line.starts_with("msg") && line.contains(text));
            let want = format!("{level:?} (non-member)@n0 {text}");
            assert!(got.last().unwrap().contains(&want), "{want}: {got:?}");
        }
    }
    // Node 2 never joined: still a ring of its own.
    let status = connect(nodes[2].client).status(t).unwrap();
    assert_eq!(status.leader, Some(NodeId(2)));
    for n in nodes {
        n.stop();
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A token ring's config with process groups and each member's client socket
/// (`member-I.sock`, relative to the config's directory) beside its client port.
fn config_with_client_paths(peers: &[u16], clients: &[u16]) -> String {
    let mut config = String::new();
    for line in token_config(peers, clients, "process_groups = true\n").lines() {
        config += line;
        config.push('\n');
        if let Some(port) = line.strip_prefix("client_addr = \"127.0.0.1:") {
            let i = clients.iter().position(|c| port == format!("{c}\""));
            config += &format!("client_path = \"member-{}.sock\"\n", i.unwrap());
        }
    }
    config
}

#[test]
fn clients_on_the_nodes_host_use_its_unix_socket_as_they_use_its_port() {
    let dir = temp_dir("groups-unix");
    let peers: Vec<u16> = (0..3).map(|_| free_peer_port()).collect();
    let clients: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let config = config_with_client_paths(&peers, &clients);
    let socket = |i: usize| dir.join(format!("member-{i}.sock"));
    // A socket file left by a node that is gone is replaced.
    drop(std::os::unix::net::UnixListener::bind(socket(1)).unwrap());
    assert!(socket(1).exists());
    let path = dir.join("cluster.toml");
    std::fs::write(&path, config).unwrap();
    let nodes = start(&path, &peers, &clients, 3);
    wait_for_the_whole_ring(&nodes);
    let by_path = |i: usize| {
        let end = Instant::now() + PATIENCE;
        loop {
            match Client::connect(socket(i).to_str().unwrap()) {
                Ok(c) => return c,
                Err(e) if Instant::now() > end => panic!("member {i}'s socket: {e}"),
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    };
    let t = PATIENCE;
    // Listeners on both kinds of connection, a sender on the socket.
    let mut on_socket = by_path(1);
    on_socket.group_listen("orders", t).unwrap();
    let mut on_port = connect(nodes[2].client);
    on_port.group_listen("orders", t).unwrap();
    let mut sender = by_path(0);
    sender.group_join("orders", "carol", true, t).unwrap();
    // The join is asked for, not yet delivered: carol sends once she is a member.
    let mut a = listen_until(&mut on_socket, |l| l.ends_with("[carol@n0]"));
    until_member(&mut sender, "orders", "carol");
    let msgs: Vec<String> = (0..200).map(|i| format!("u{i}")).collect();
    let refs: Vec<&str> = msgs.iter().map(String::as_str).collect();
    multicast(&mut sender, "orders", "carol", DeliveryLevel::Agreed, &refs);
    a.extend(listen_until(&mut on_socket, |l| l.ends_with(" u199")));
    let b = listen_until(&mut on_port, |l| l.ends_with(" u199"));
    assert_eq!(a, b, "the socket's listener was told another story");
    assert_eq!(a.iter().filter(|l| l.starts_with("msg")).count(), 200);
    assert!(a.iter().any(|l| l.contains("Agreed carol@n0 u0")), "{a:#?}");
    // `unix:PATH` names the socket too; a path nobody listens on is a connect error.
    let mut prefixed = Client::connect(&format!("unix:{}", socket(2).display())).unwrap();
    assert!(prefixed.groups(t).unwrap().iter().any(|g| g.0 == "orders"));
    let missing = dir.join("nobody.sock");
    assert!(matches!(
        Client::connect(missing.to_str().unwrap()),
        Err(ClientError::Connect { .. })
    ));
    drop((on_socket, sender, prefixed));
    for n in nodes {
        n.stop();
    }
    for i in 0..3 {
        assert!(!socket(i).exists(), "member {i}'s socket outlived its node");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn clients_on_the_nodes_host_trade_frames_through_shared_memory_and_one_that_breaks_its_ring_is_closed()
 {
    use abcast_runtime::frame;
    use abcast_runtime::shm;
    use std::io::{Read, Write};
    use std::os::fd::{AsFd, AsRawFd};
    use std::os::unix::net::UnixStream;

    let dir = temp_dir("groups-shm");
    let peers: Vec<u16> = (0..3).map(|_| free_peer_port()).collect();
    let clients: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let mut config = config_with_client_paths(&peers, &clients);
    // The smallest rings: 2 MB of messages wrap them and fill them many times.
    let ring_bytes = shm::RING_BYTES_MIN;
    config += &format!("[transport]\nclient_shm_bytes = {ring_bytes}\n");
    let socket = |i: usize| dir.join(format!("member-{i}.sock"));
    let path = dir.join("cluster.toml");
    std::fs::write(&path, config).unwrap();
    let nodes = start(&path, &peers, &clients, 3);
    wait_for_the_whole_ring(&nodes);
    let t = PATIENCE;
    let by_shm = |i: usize| Client::connect(&format!("shm:{}", socket(i).display())).unwrap();
    let mut on_rings = by_shm(1);
    assert_eq!(on_rings.channel(), "shared memory");
    on_rings.group_listen("bulk", t).unwrap();
    let mut on_port = connect(nodes[2].client);
    on_port.group_listen("bulk", t).unwrap();
    let mut sender = by_shm(0);
    sender.group_join("bulk", "dave", true, t).unwrap();
    let mut a = listen_until(&mut on_rings, |l| l.ends_with("[dave@n0]"));
    until_member(&mut sender, "bulk", "dave");
    let msgs: Vec<String> = (0..2000)
        .map(|i| format!("m{i:04}-{}", "x".repeat(994)))
        .collect();
    let refs: Vec<&str> = msgs.iter().map(String::as_str).collect();
    multicast(&mut sender, "bulk", "dave", DeliveryLevel::Agreed, &refs);
    a.extend(listen_until(&mut on_rings, |l| l.contains(" m1999-")));
    let b = listen_until(&mut on_port, |l| l.contains(" m1999-"));
    assert_eq!(a, b, "the rings' listener was told another story");
    assert_eq!(a.iter().filter(|l| l.starts_with("msg")).count(), 2000);

    // A client that opens the rings, then claims to have written more than its ring holds:
    // its node closes it, and serves the others on.
    let mut raw = UnixStream::connect(socket(1)).unwrap();
    let ask = ClientFrame::ShmOpen;
    raw.write_all(&frame::encode_client_header_unchecked(ask.kind(), &ask.encode()).unwrap())
        .unwrap();
    let mut buf = [0u8; 256];
    let (n, fd) = shm::recv_with_fd(raw.as_fd(), &mut buf).unwrap();
    assert!(n > 0);
    let fd = fd.expect("ShmReady carries the region");
    // SAFETY: a shared mapping of the region's header page, unmapped below.
    let header = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            4096,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd.as_raw_fd(),
            0,
        )
    };
    assert_ne!(header, libc::MAP_FAILED);
    // Ring 0's head (offset 1024): far past its tail.
    // SAFETY: inside the mapped page, 8-byte aligned.
    unsafe {
        header
            .cast::<u8>()
            .add(1024)
            .cast::<u64>()
            .write_volatile(1 << 40)
    };
    shm::ring_doorbell(raw.as_fd()).unwrap();
    raw.set_read_timeout(Some(t)).unwrap();
    let mut rest = Vec::new();
    let end = raw.read_to_end(&mut rest);
    // Closed: an end of file, or a reset when a doorbell was still unread at the node.
    assert!(
        end.is_ok()
            || end
                .as_ref()
                .is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionReset),
        "the node must close the connection: {end:?}"
    );
    // SAFETY: the mapping made above.
    unsafe { libc::munmap(header, 4096) };

    // The rings are offered on the Unix socket only.
    let mut tcp = connect(nodes[1].client);
    tcp.send(&ClientFrame::ShmOpen).unwrap();
    match tcp.recv(Some(t)).unwrap() {
        ClientFrame::Error { text } => assert!(text.contains("Unix"), "{text}"),
        other => panic!("ShmOpen on TCP answered {other:?}"),
    }
    // The listener on the rings goes on.
    multicast(
        &mut sender,
        "bulk",
        "dave",
        DeliveryLevel::Agreed,
        &["after"],
    );
    let c = listen_until(&mut on_rings, |l| l.ends_with(" after"));
    assert_eq!(c.len(), 1, "{c:?}");
    drop((on_rings, sender));
    for n in nodes {
        n.stop();
    }
    let _ = std::fs::remove_dir_all(&dir);
}
