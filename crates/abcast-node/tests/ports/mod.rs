//! Ports for a test's nodes, whose config names every member's ports before any node binds
//! them (issue 33).
//!
//! The first call in a test's thread moves that thread into a network namespace of its own
//! (`abcast_runtime::netns::isolate_thread_network`: only `lo`, up), and ports are handed
//! out in order from [`FIRST`]: nothing else lives there, so none can be taken by another
//! test or program between the test writing the config and a node binding it. The nodes
//! the test starts afterwards (threads of its thread) inherit the namespace. Without the
//! privilege to make one (not root), ports are picked by binding and releasing, as before,
//! and the test says so: they may collide.
#![allow(dead_code)]

use std::cell::RefCell;
use std::net::{TcpListener, UdpSocket};

/// The first port handed out in a namespace of the test's own.
pub const FIRST: u16 = 7000;

struct Ports {
    isolated: bool,
    next: u16,
}

thread_local! {
    static PORTS: RefCell<Option<Ports>> = const { RefCell::new(None) };
}

/// The next fixed port of this test's namespace, or `None` without one.
fn fixed() -> Option<u16> {
    PORTS.with(|p| {
        let mut p = p.borrow_mut();
        let ports =
            p.get_or_insert_with(|| match abcast_runtime::netns::isolate_thread_network() {
                Ok(()) => Ports {
                    isolated: true,
                    next: FIRST,
                },
                Err(e) => {
                    eprintln!(
                        "this test has no network namespace of its own ({e}): its ports are \
                     picked by binding and releasing them, and may collide"
                    );
                    Ports {
                        isolated: false,
                        next: 0,
                    }
                }
            });
        ports.isolated.then(|| {
            let port = ports.next;
            ports.next = ports.next.checked_add(1).expect("ports left");
            port
        })
    })
}

/// A TCP port on 127.0.0.1 for this test (see the module comment).
pub fn port() -> u16 {
    fixed().unwrap_or_else(|| {
        TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port()
    })
}

/// A peer port: TCP and UDP on it, and UDP on it plus `offset` (the token's socket), free
/// for this test. In a namespace of the test's own, fixed ports spaced well below `offset`
/// apart never meet one another's `+ offset`.
pub fn peer_port(offset: u16) -> u16 {
    if let Some(p) = fixed() {
        return p;
    }
    for _ in 0..1000 {
        let tcp = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = tcp.local_addr().expect("addr").port();
        let Some(token_port) = port.checked_add(offset) else {
            continue;
        };
        let udp = UdpSocket::bind(("127.0.0.1", port));
        let token = UdpSocket::bind(("127.0.0.1", token_port));
        if udp.is_ok() && token.is_ok() {
            return port;
        }
    }
    panic!("no free peer port");
}
