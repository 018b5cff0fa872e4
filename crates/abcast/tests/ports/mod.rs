//! Ports for a test's cluster of `abcast node` processes, whose config names every
//! member's ports before any node binds them (issue 33).
//!
//! The first call in a test's thread moves that thread into a network namespace of its own
//! (`abcast_runtime::netns::isolate_thread_network`: only `lo`, up), and the ports are
//! handed out in order from [`FIRST`]: nothing else lives there, so none can be taken by
//! another test or program between the test writing the config and a node binding it, or
//! between a kill and a restart. The nodes the test starts afterwards, and the threads it
//! spawns, inherit the namespace. Without the privilege to make one (not root), ports are
//! picked by binding and releasing, as before, and the test says so: they may collide.
#![allow(dead_code)]

use std::cell::RefCell;

/// The first port handed out in a namespace of the test's own.
pub const FIRST: u16 = 7000;

struct Ports {
    isolated: bool,
    next: u16,
}

thread_local! {
    static PORTS: RefCell<Option<Ports>> = const { RefCell::new(None) };
}

/// A port on 127.0.0.1 for this test's cluster (see the module comment).
pub fn port() -> u16 {
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
        if ports.isolated {
            let port = ports.next;
            ports.next = ports.next.checked_add(1).expect("ports left");
            port
        } else {
            released_port()
        }
    })
}

/// `127.0.0.1:<port()>`.
pub fn addr() -> String {
    format!("127.0.0.1:{}", port())
}

/// A port free now, below the kernel's ephemeral range (32768 and up here), so no outgoing
/// connection takes it between a kill and a restart; one counter for the whole test
/// process, so tests running side by side never pick the same one.
fn released_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let base = 20_000 + (std::process::id() % 500) * 20;
    loop {
        let k = NEXT.fetch_add(1, Ordering::SeqCst);
        assert!(k < 4000, "no free port from {base}");
        if let Ok(l) = std::net::TcpListener::bind(("127.0.0.1", (base + k) as u16)) {
            return l.local_addr().expect("addr").port();
        }
    }
}
