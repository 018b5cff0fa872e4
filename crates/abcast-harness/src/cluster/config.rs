//! The cluster's config and directory: a fresh temporary directory, the generated
//! `cluster.toml` (from `nodeconfig::local_cluster`, on loopback ports checked free, with the
//! spec's edits and node placement applied), and the dotted-key edits benchmarks make.

use super::ClusterSpec;
use crate::error::{HarnessError, runtime};
use std::collections::BTreeSet;
use std::fs;
use std::hash::{BuildHasher, Hasher};
use std::net::TcpListener;
use std::path::PathBuf;

/// The config edits that select a storage back-end by its `--storage` name.
pub fn storage_edits(kind: &str) -> Vec<(String, toml::Value)> {
    let (k, sync) = match kind {
        "durable" | "durable-inloop" | "durable-buffered" => ("durable", Some(true)),
        "durable-nosync" => ("durable", Some(false)),
        "none" => ("none", None),
        _ => ("memory", None),
    };
    let mut edits = vec![("storage.kind".to_string(), toml::Value::from(k))];
    if let Some(sync) = sync {
        edits.push(("storage.sync".to_string(), toml::Value::from(sync)));
    }
    if kind == "durable-inloop" {
        edits.push(("storage.sync_thread".to_string(), toml::Value::from(false)));
    }
    if kind == "durable-buffered" {
        edits.push(("storage.direct_io".to_string(), toml::Value::from(false)));
    }
    edits
}

/// The config edits that make the cluster run `protocol` (a `--protocol` name of `demo` or
/// `chaos`) on `storage`: `multiring` is two U-Ring rings over every node, a client's
/// values spread round-robin over them.
pub fn protocol_edits(protocol: &str, storage: &str) -> Vec<(String, toml::Value)> {
    let mut edits = storage_edits(storage);
    match protocol {
        "multiring" => {
            let ring = |g: i64| {
                let mut t = toml::Table::new();
                t.insert("group".into(), toml::Value::Integer(g));
                toml::Value::Table(t)
            };
            edits.push(("rings".into(), toml::Value::Array(vec![ring(1), ring(2)])));
            edits.push((
                "multiring.propose_to".into(),
                toml::Value::from("round-robin"),
            ));
        }
        "uring" => {}
        p => edits.push(("protocol".into(), toml::Value::from(p))),
    }
    edits
}

/// A fresh temporary directory, removed on drop unless kept.
pub(super) struct TempDir {
    pub(super) path: PathBuf,
    pub(super) keep: bool,
}

impl TempDir {
    pub(super) fn new(prefix: &str) -> Result<TempDir, HarnessError> {
        let base = std::env::temp_dir();
        for _ in 0..16 {
            let path = base.join(format!(
                "{prefix}-{}-{:08x}",
                std::process::id(),
                random_u64() as u32
            ));
            match fs::create_dir(&path) {
                Ok(()) => return Ok(TempDir { path, keep: false }),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return runtime(format!("cannot create {}", path.display()), e),
            }
        }
        Err(HarnessError::Runtime(format!(
            "cannot create a fresh directory in {}",
            base.display()
        )))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if !self.keep {
            let _ = fs::remove_dir_all(&self.path);
        }
    }
}

/// A random number without a dependency: std seeds every `RandomState` from the OS.
fn random_u64() -> u64 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(std::process::id() as u64);
    h.finish()
}

/// Every TCP port the config mentions: strings that parse as socket addresses, and integers
/// under a key containing "port". Found by walking the TOML, so this does not depend on the
/// config's layout.
fn config_ports(value: &toml::Value, key: &str, out: &mut BTreeSet<u16>) {
    match value {
        toml::Value::String(s) => {
            if let Ok(addr) = s.parse::<std::net::SocketAddr>() {
                out.insert(addr.port());
            }
        }
        toml::Value::Integer(i) if key.contains("port") => {
            if let Ok(p) = u16::try_from(*i) {
                out.insert(p);
            }
        }
        toml::Value::Array(items) => items.iter().for_each(|v| config_ports(v, key, out)),
        toml::Value::Table(t) => t.iter().for_each(|(k, v)| config_ports(v, k, out)),
        _ => {}
    }
}

fn ports_free(ports: &BTreeSet<u16>) -> bool {
    // Hold every listener until all are bound, so two ports in the set cannot both pass
    // because one was released in between.
    let mut held = Vec::with_capacity(ports.len());
    for &p in ports {
        match TcpListener::bind(("127.0.0.1", p)) {
            Ok(l) => held.push(l),
            Err(_) => return false,
        }
    }
    true
}

/// Sets a dotted key ("transport.buffer_size") in a TOML table, creating tables on the way.
/// A part may index an existing array of tables: "members[3].roles".
pub fn set_toml_key(
    table: &mut toml::Table,
    dotted: &str,
    value: toml::Value,
) -> Result<(), HarnessError> {
    let mut parts: Vec<&str> = dotted.split('.').collect();
    let Some(last) = parts.pop() else {
        return Err(HarnessError::Runtime(format!(
            "empty config key {dotted:?}"
        )));
    };
    let bad = |what: String| {
        Err(HarnessError::Runtime(format!(
            "config key {dotted:?}: {what}"
        )))
    };
    let mut t = table;
    for part in parts {
        let (name, index) = match part.strip_suffix(']').and_then(|p| p.split_once('[')) {
            Some((name, i)) => match i.parse::<usize>() {
                Ok(i) => (name, Some(i)),
                Err(_) => return bad(format!("{part:?} has no valid index")),
            },
            None => (part, None),
        };
        let entry = t
            .entry(name.to_string())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        let entry = match (index, entry) {
            (None, e) => e,
            (Some(i), toml::Value::Array(items)) => match items.get_mut(i) {
                Some(e) => e,
                None => return bad(format!("{name:?} has no element {i}")),
            },
            (Some(_), _) => return bad(format!("{name:?} is not an array")),
        };
        t = match entry {
            toml::Value::Table(inner) => inner,
            _ => return bad(format!("{part:?} is not a table")),
        };
    }
    t.insert(last.to_string(), value);
    Ok(())
}

/// The port of `members[i].KEY` in a generated config.
fn member_port(table: &toml::Table, i: usize, key: &str) -> Option<u16> {
    let member = table.get("members")?.as_array()?.get(i)?;
    let addr = member.get(key)?.as_str()?;
    Some(addr.parse::<std::net::SocketAddr>().ok()?.port())
}

/// The config text for a cluster of `nodes` on free loopback ports, with the spec's edits
/// applied. The layout is `nodeconfig::local_cluster`'s; we only touch the keys we own.
pub(super) fn cluster_config(spec: &ClusterSpec) -> Result<toml::Table, HarnessError> {
    let n = spec.nodes as usize;
    for _attempt in 0..64 {
        // Ports from 20000 up, away from the usual ephemeral range (32768..60999) where the
        // kernel picks client ports; a clash is still detected below and retried.
        let span = (12_000u64).saturating_sub(4 * n as u64).max(1);
        let base_port = 20_000 + (random_u64() % span) as u16;
        let text = abcast_node::nodeconfig::local_cluster(n, base_port);
        let mut table: toml::Table = match text.parse() {
            Ok(t) => t,
            Err(e) => return runtime("nodeconfig::local_cluster produced invalid TOML", e),
        };
        let mut ports = BTreeSet::new();
        config_ports(&toml::Value::Table(table.clone()), "", &mut ports);
        if !ports_free(&ports) {
            continue;
        }
        for (key, value) in &spec.config_edits {
            set_toml_key(&mut table, key, value.clone())?;
        }
        for (i, place) in spec.placement.iter().enumerate() {
            for key in ["addr", "client_addr"] {
                let dotted = format!("members[{i}].{key}");
                let Some(port) = member_port(&table, i, key) else {
                    return runtime(&dotted, "the generated config has no port there");
                };
                let addr = std::net::SocketAddrV4::new(place.addr, port).to_string();
                set_toml_key(&mut table, &dotted, toml::Value::String(addr))?;
            }
        }
        return Ok(table);
    }
    Err(HarnessError::Runtime(
        "found no free block of loopback ports after 64 tries".to_string(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::test_support::spec;
    use std::path::Path;

    #[test]
    fn generated_config_with_edits_is_accepted_by_the_node() {
        let table = cluster_config(&spec(4)).unwrap();
        let text = toml::to_string(&table).unwrap();
        let cfg = abcast_node::nodeconfig::parse(&text, Some(3), Path::new("/tmp")).unwrap();
        assert_eq!(cfg.members.len(), 4);
        assert_eq!(cfg.transport.buffer_size, 131_072);
        let mut ports = BTreeSet::new();
        config_ports(&toml::Value::Table(table), "", &mut ports);
        assert_eq!(
            ports.len(),
            8,
            "a peer and a client port per node: {ports:?}"
        );
    }

    #[test]
    fn set_toml_key_creates_tables_and_refuses_to_descend_into_values() {
        let mut t = toml::Table::new();
        set_toml_key(&mut t, "a.b.c", toml::Value::Integer(1)).unwrap();
        assert_eq!(t["a"]["b"]["c"].as_integer(), Some(1));
        assert!(set_toml_key(&mut t, "a.b.c.d", toml::Value::Integer(2)).is_err());
    }

    #[test]
    fn set_toml_key_indexes_arrays_of_tables() {
        let mut t: toml::Table = abcast_node::nodeconfig::local_cluster(3, 7400)
            .parse()
            .unwrap();
        let learner = toml::Value::Array(vec![toml::Value::String("learner".into())]);
        set_toml_key(&mut t, "members[2].roles", learner.clone()).unwrap();
        assert_eq!(t["members"][2]["roles"], learner);
        assert!(set_toml_key(&mut t, "members[3].roles", learner.clone()).is_err());
        assert!(set_toml_key(&mut t, "members[x].roles", learner.clone()).is_err());
        assert!(set_toml_key(&mut t, "cluster_id[0].a", learner).is_err());
    }
}
