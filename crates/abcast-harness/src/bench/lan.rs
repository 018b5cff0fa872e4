//! An emulated switched LAN on one host, for experiments whose figure assumes one machine
//! per node on a network of fixed bandwidth (seed 003 §6: servers "interconnected through
//! an HP ProCurve2900-48G Gigabit switch").
//!
//! On one host every node shares the two cores, and the loopback has no bandwidth of its
//! own: its limit is how fast the cores copy. A figure such as seed 003 fig 4 (throughput
//! per receiver as receivers are added) then measures the host's CPU, not the protocol: the
//! kernel copies each multicast datagram once per receiving socket on those same cores.
//! This module builds what the seed ran on, with the kernel's own parts:
//!
//! - one network namespace per node (`abcast-TAG-nI`), with `lo` and one interface `eth0`
//!   holding `10.77.K.(I+1)/24`, and a route for 224.0.0.0/4 through it;
//! - a bridge `abrTAG` as the switch (multicast snooping off, so it floods group traffic to
//!   every port, as a switch without IGMP snooping does), in a namespace of its own
//!   (`abcast-TAG-sw`) where the host's netfilter is not called for bridged frames
//!   (`net.bridge.bridge-nf-call-*tables = 0` there: a switch does not run its hosts'
//!   firewall, and with `br_netfilter` loaded that pass cost about a tenth of both cores in
//!   the group-peer workload, for abcast and Corosync alike);
//! - a veth pair per node, `eth0` in the node's namespace and `abTAGhI` on the bridge;
//! - a veth pair to the caller's namespace, `abTAGgw` holding `10.77.K.254/24`, so the
//!   caller can reach the nodes;
//! - a token-bucket shaper (`tc qdisc tbf`) on both ends of each pair: the node's NIC sends
//!   at most `rate_mbit`, and the switch port towards the node delivers at most `rate_mbit`
//!   (none with [`EmulatedLan::create_unshaped`], for comparisons where the link should
//!   never be the limit, only the namespaces and the bridge).
//!   The shaper queues rather than drops (its limit is larger than any socket's send
//!   buffer), so a sender that outruns its link is held by its socket buffer, as on a real
//!   NIC, and TCP sees the bandwidth as a real link's.
//!
//! `tc netem` is missing from this kernel, `tbf` is not. Frames are jumbo ([`LAN_MTU_BYTES`])
//! so that a 40 KiB datagram is 5 frames, not 28: on one host every frame costs the same
//! cores the nodes run on. Building needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN) and the
//! `ip` and `tc` programs; [`EmulatedLan::create`] says which is missing. Dropping the value
//! removes every namespace, link and bridge it made, and a name clash with an earlier run
//! that died before cleaning up is cleaned first.

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::Command;

pub use abcast_runtime::netns::enter_netns;

/// MTU of every link: jumbo frames, as on the 1 and 10 Gbit/s LANs of data centres.
pub const LAN_MTU_BYTES: u32 = 9000;
/// Most nodes on one emulated LAN (addresses .1 to .NODES_MAX; .254 is the bridge).
pub const LAN_NODES_MAX: usize = 64;
/// Slowest and fastest link the shaper is asked for.
pub const LAN_RATE_MBIT_MIN: u32 = 10;
pub const LAN_RATE_MBIT_MAX: u32 = 100_000;
/// The shaper's queue: larger than any socket send buffer the nodes ask for (the multicast
/// socket's is 4 MiB), so a full queue holds the sender in its socket instead of dropping.
const SHAPER_LIMIT_BYTES: u64 = 16 << 20;

/// One node's place on the LAN.
#[derive(Debug, Clone)]
pub struct LanNode {
    /// The namespace's name (`ip netns` lists it).
    pub netns: String,
    pub addr: Ipv4Addr,
}

impl LanNode {
    /// The namespace's handle, to enter with `setns(2)`.
    pub fn netns_path(&self) -> PathBuf {
        PathBuf::from("/var/run/netns").join(&self.netns)
    }
}

/// The LAN: namespaces, veth pairs, shapers and the bridge. Removed when dropped.
#[derive(Debug)]
pub struct EmulatedLan {
    bridge: String,
    /// The switch's namespace, which holds the bridge and its ports.
    switch: String,
    /// The caller's end of the link to the switch.
    uplink: String,
    pub nodes: Vec<LanNode>,
    /// Each link's rate each way; `None` when the links are not shaped.
    pub rate_mbit: Option<u32>,
    /// The bridge's address, in the caller's namespace.
    pub gateway: Ipv4Addr,
}

fn tool(program: &str, args: &[&str]) -> Result<(), String> {
    let out = Command::new(program).args(args).output().map_err(|e| {
        format!("emulated LAN: cannot run `{program}` ({e}); it comes with the iproute2 package")
    })?;
    if out.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let hint = if stderr.contains("Operation not permitted") {
        " (the emulated LAN needs root)"
    } else {
        ""
    };
    Err(format!(
        "emulated LAN: `{program} {}` failed{hint}: {}",
        args.join(" "),
        stderr.trim()
    ))
}

/// Shapes both ends of one node's veth pair, `eth0` in namespace `ns` and the bridge port
/// `host` in the switch's namespace `sw`, to `mbit` each way.
fn shape(ns: &str, sw: &str, host: &str, mbit: u32) -> Result<(), String> {
    let rate = format!("{mbit}mbit");
    let burst = burst_bytes(mbit).to_string();
    let limit = SHAPER_LIMIT_BYTES.to_string();
    let tbf = [
        "root", "tbf", "rate", &rate, "burst", &burst, "limit", &limit,
    ];
    let mut node_side = vec!["-n", ns, "qdisc", "add", "dev", "eth0"];
    node_side.extend_from_slice(&tbf);
    tool("tc", &node_side)?;
    let mut port_side = vec!["-n", sw, "qdisc", "add", "dev", host];
    port_side.extend_from_slice(&tbf);
    tool("tc", &port_side)
}

/// The shaper's token bucket: enough for 2 ms at the rate (timer slack) and at least a
/// few jumbo frames.
fn burst_bytes(rate_mbit: u32) -> u64 {
    (u64::from(rate_mbit) * 1_000_000 / 8 / 500).max(4 * u64::from(LAN_MTU_BYTES))
}

impl EmulatedLan {
    /// Builds a LAN of `nodes` nodes whose links carry `rate_mbit` each way. `tag` (up to 6
    /// characters from `[a-z0-9]`) names its parts, so two LANs of different tags coexist;
    /// the subnet 10.77.K.0/24 is drawn from the tag.
    pub fn create(tag: &str, nodes: usize, rate_mbit: u32) -> Result<EmulatedLan, String> {
        if !(LAN_RATE_MBIT_MIN..=LAN_RATE_MBIT_MAX).contains(&rate_mbit) {
            return Err(format!(
                "emulated LAN: link rate {rate_mbit} Mbit/s, must be {LAN_RATE_MBIT_MIN} to \
                 {LAN_RATE_MBIT_MAX}"
            ));
        }
        Self::create_with(tag, nodes, Some(rate_mbit))
    }

    /// The same LAN without shapers: each veth pair carries what the cores can copy.
    pub fn create_unshaped(tag: &str, nodes: usize) -> Result<EmulatedLan, String> {
        Self::create_with(tag, nodes, None)
    }

    fn create_with(tag: &str, nodes: usize, rate_mbit: Option<u32>) -> Result<EmulatedLan, String> {
        if tag.is_empty()
            || tag.len() > 6
            || !tag
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        {
            return Err(format!(
                "emulated LAN: tag {tag:?} must be 1 to 6 characters of a-z and 0-9"
            ));
        }
        if nodes == 0 || nodes > LAN_NODES_MAX {
            return Err(format!(
                "emulated LAN: {nodes} nodes, must be 1 to {LAN_NODES_MAX}"
            ));
        }
        let k = tag
            .bytes()
            .fold(17u32, |h, b| h.wrapping_mul(31).wrapping_add(u32::from(b)))
            % 250;
        let subnet = |host: usize| Ipv4Addr::new(10, 77, k as u8, host as u8);
        let lan = EmulatedLan {
            bridge: format!("abr{tag}"),
            switch: format!("abcast-{tag}-sw"),
            uplink: format!("ab{tag}gw"),
            nodes: (0..nodes)
                .map(|i| LanNode {
                    netns: format!("abcast-{tag}-n{i}"),
                    addr: subnet(i + 1),
                })
                .collect(),
            rate_mbit,
            gateway: subnet(254),
        };
        // Leftovers of a run that died before its drop: same names, so remove them first.
        lan.remove();
        // From here on an early return drops `lan`, which removes what was built.
        lan.build(tag)?;
        Ok(lan)
    }

    fn build(&self, tag: &str) -> Result<(), String> {
        let (br, sw) = (self.bridge.as_str(), self.switch.as_str());
        let mtu = LAN_MTU_BYTES.to_string();
        let gateway = format!("{}/24", self.gateway);
        tool("ip", &["netns", "add", sw])?;
        // Bridged frames skip the host's netfilter in the switch's namespace (these keys
        // are per namespace). A kernel without `br_netfilter` has no such keys and never
        // calls it: nothing to turn off.
        for table in ["iptables", "ip6tables", "arptables"] {
            let key = format!("net.bridge.bridge-nf-call-{table}=0");
            let _ = tool("ip", &["netns", "exec", sw, "sysctl", "-qw", &key]);
        }
        tool("ip", &["-n", sw, "link", "add", br, "type", "bridge"])?;
        tool(
            "ip",
            &[
                "-n",
                sw,
                "link",
                "set",
                br,
                "type",
                "bridge",
                "mcast_snooping",
                "0",
            ],
        )?;
        tool("ip", &["-n", sw, "link", "set", br, "up"])?;
        // The caller's link to the switch.
        tool(
            "ip",
            &[
                "link",
                "add",
                &self.uplink,
                "mtu",
                &mtu,
                "type",
                "veth",
                "peer",
                "name",
                "uplink",
                "netns",
                sw,
                "mtu",
                &mtu,
            ],
        )?;
        tool(
            "ip",
            &["-n", sw, "link", "set", "dev", "uplink", "master", br, "up"],
        )?;
        tool("ip", &["addr", "add", &gateway, "dev", &self.uplink])?;
        tool("ip", &["link", "set", &self.uplink, "up"])?;
        for (i, n) in self.nodes.iter().enumerate() {
            let ns = n.netns.as_str();
            let host = format!("ab{tag}h{i}");
            let addr = format!("{}/24", n.addr);
            tool("ip", &["netns", "add", ns])?;
            tool(
                "ip",
                &[
                    "-n", sw, "link", "add", &host, "mtu", &mtu, "type", "veth", "peer", "name",
                    "eth0", "netns", ns, "mtu", &mtu,
                ],
            )?;
            tool("ip", &["-n", sw, "link", "set", &host, "master", br, "up"])?;
            tool("ip", &["-n", ns, "addr", "add", &addr, "dev", "eth0"])?;
            tool("ip", &["-n", ns, "link", "set", "eth0", "up"])?;
            tool("ip", &["-n", ns, "link", "set", "lo", "up"])?;
            tool(
                "ip",
                &["-n", ns, "route", "add", "224.0.0.0/4", "dev", "eth0"],
            )?;
            if let Some(mbit) = self.rate_mbit {
                shape(ns, sw, &host, mbit)?;
            }
        }
        Ok(())
    }

    /// The switch's namespace (`abcast-TAG-sw`): the bridge and its ports `abTAGhI`.
    pub fn switch_netns(&self) -> &str {
        &self.switch
    }

    /// Removes the namespaces (which takes their veth pairs and the bridge along); whatever
    /// does not exist is skipped. A bridge of the same name in the caller's namespace, as
    /// builds before the switch had a namespace left it, goes too.
    fn remove(&self) {
        let switch = PathBuf::from("/var/run/netns").join(&self.switch);
        let namespaces = self.nodes.iter().map(LanNode::netns_path);
        for ns in namespaces.chain(std::iter::once(switch)) {
            if ns.exists() {
                let name = ns.file_name().and_then(|n| n.to_str()).unwrap_or_default();
                let _ = tool("ip", &["netns", "del", name]);
            }
        }
        for link in [&self.bridge, &self.uplink] {
            if PathBuf::from("/sys/class/net").join(link).exists() {
                let _ = tool("ip", &["link", "del", link]);
            }
        }
    }
}

impl Drop for EmulatedLan {
    fn drop(&mut self) {
        self.remove();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_shapes_are_refused_before_anything_is_built() {
        assert!(EmulatedLan::create("Bad!", 3, 1000).is_err());
        assert!(EmulatedLan::create("toolongtag", 3, 1000).is_err());
        assert!(EmulatedLan::create("ok", 0, 1000).is_err());
        assert!(EmulatedLan::create("ok", LAN_NODES_MAX + 1, 1000).is_err());
        let e = EmulatedLan::create("ok", 3, 1).unwrap_err();
        assert!(e.contains("link rate 1 Mbit/s"), "{e}");
    }

    #[test]
    fn the_token_bucket_holds_two_ms_and_at_least_four_frames() {
        assert_eq!(burst_bytes(1000), 250_000);
        assert_eq!(burst_bytes(10), 4 * 9000);
    }
}
