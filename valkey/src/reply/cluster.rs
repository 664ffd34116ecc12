//! `CLUSTER MYID`, `CLUSTER NODES` and `CLUSTER INFO`.
//!
//! lb reads topology from `CLUSTER NODES` rather than `CLUSTER SHARDS`: the text format is the
//! same on every Redis and Valkey version, carries the health flags (`fail`, `fail?`) that
//! `SHARDS` folds into one `health` word, and names the slots each primary owns, including the
//! `[slot->-id]` / `[slot-<-id]` markers of a legacy (non-atomic) migration in progress.
//!
//! For the record, `CLUSTER SHARDS` on 9.1.2 answers one flat key/value array per shard:
//! `slots` (a flat array of start/end integers: `:5461 :10922 :12000 :12001`), `nodes` (per node
//! `id`, `port`, `ip`, `endpoint`, `role` `master`|`replica`, `replication-offset`, `health`
//! `online`|`fail`|`loading`) and the shard's own `id`. A killed primary shows `health fail`
//! with its slots still listed.
//!
//! `CLUSTER MYID` on valkey-server 9.1.2: `$40\r\n95d28e2b170b8637d95b9fce05bf87b0bb3d9f28\r\n`.
//!
//! `CLUSTER NODES`: one bulk string, one line per known node, fields separated by spaces:
//!
//! ```text
//! <id> <ip:port@busport[,hostname]> <flags> <primary-id|-> <ping-sent-ms> <pong-recv-ms> <config-epoch> <link> <slot>...
//! 80052a6d... 127.0.0.1:7003@17003 myself,master - 0 0 1 connected 10923-11999 12002-12181 12183-12999 13006-16383
//! 95d28e2b... 127.0.0.1:7001@17001 master - 0 1796020157228 3 connected 0-5460 12182
//! 1888b4ca... 127.0.0.1:7002@17002 master,fail - 1796020139173 1796020137168 4 disconnected 5461-10922 12000-12001 13000-13005
//! ```
//!
//! Flags seen: `myself`, `master`, `slave`, `fail?` (this node suspects it), `fail` (a majority
//! of primaries agreed), `handshake`, `noaddr`, `nofailover`. After the third node above was
//! killed, the others flagged it `master,fail` with link `disconnected` about two node timeouts
//! later; after it came back, `fail` cleared once it answered again.
//!
//! `CLUSTER INFO`: a bulk string of `field:value` lines (`cluster_state:ok|fail`,
//! `cluster_slots_assigned`, `cluster_slots_ok`, `cluster_slots_pfail`, `cluster_slots_fail`,
//! `cluster_known_nodes`, `cluster_size`, `cluster_current_epoch`, message counters, ...).

use std::collections::BTreeMap;

use redis::Value;

use super::{ParseError, as_text, describe, parse_slot_range_text};
use crate::node_id::{NodeAddr, NodeId};
use crate::slot::SlotRange;

/// Parses the reply of `CLUSTER MYID`.
pub fn parse_myid(value: &Value) -> Result<NodeId, ParseError> {
    as_text(value).and_then(NodeId::parse).ok_or_else(|| {
        ParseError::new("CLUSTER MYID", "reply", format!("expected a 40-hex node id, got {}", describe(value)))
    })
}

/// A node as one `CLUSTER NODES` line describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterNode {
    pub id: NodeId,
    /// Client address; `None` while the address is unknown (`noaddr`, `:0@0`, or `:port@bus`
    /// on a node's own line before it met another node).
    pub addr: Option<NodeAddr>,
    /// Cluster bus port (client port + 10000 unless configured otherwise).
    pub bus_port: u16,
    pub role: NodeRole,
    pub flags: NodeFlags,
    pub config_epoch: u64,
    /// Whether the reporting node's bus link to this node is up (`connected`).
    pub link_connected: bool,
    /// Slot ranges this node owns (primaries only; in line order).
    pub slots: Vec<SlotRange>,
}

impl ClusterNode {
    /// Serving as far as the reporting node can tell: not failed or suspected, not half-joined,
    /// addressable and linked. A node that never met another does not know its own IP (its
    /// line reads `:port@busport`), so `myself` needs no address.
    pub fn is_healthy(&self) -> bool {
        let f = &self.flags;
        !(f.fail || f.pfail || f.handshake || f.noaddr) && (self.addr.is_some() || f.myself) && self.link_connected
    }

    pub fn is_primary(&self) -> bool {
        self.role == NodeRole::Primary
    }

    /// Number of slots this node owns.
    pub fn slot_count(&self) -> u32 {
        self.slots.iter().map(|r| u32::from(r.len())).sum()
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeRole {
    Primary,
    /// A replica of the given primary (`None` while the primary is unknown).
    Replica {
        primary: Option<NodeId>,
    },
}

/// The health flags of a `CLUSTER NODES` line.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NodeFlags {
    /// The line describes the node that answered.
    pub myself: bool,
    /// `fail`: a majority of primaries agreed the node is down.
    pub fail: bool,
    /// `fail?`: the reporting node alone suspects it.
    pub pfail: bool,
    pub handshake: bool,
    pub noaddr: bool,
    pub nofailover: bool,
}

/// Parses the reply of `CLUSTER NODES`.
pub fn parse_cluster_nodes(value: &Value) -> Result<Vec<ClusterNode>, ParseError> {
    let text = as_text(value).ok_or_else(|| {
        ParseError::new("CLUSTER NODES", "reply", format!("expected a string, got {}", describe(value)))
    })?;
    text.lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .enumerate()
        .map(|(index, line)| parse_node_line(index, line))
        .collect()
}

fn parse_node_line(index: usize, line: &str) -> Result<ClusterNode, ParseError> {
    const COMMAND: &str = "CLUSTER NODES";
    let err = |field: &str, detail: String| ParseError::new(COMMAND, format!("line {index} {field}"), detail);
    let fields: Vec<&str> = line.split_ascii_whitespace().collect();
    // id, address, flags, primary, ping-sent, pong-recv, config-epoch, link state.
    const FIXED_FIELDS: usize = 8;
    if fields.len() < FIXED_FIELDS {
        return Err(err("fields", format!("expected at least {FIXED_FIELDS}, got {}", fields.len())));
    }
    let id = NodeId::parse(fields[0]).ok_or_else(|| err("id", format!("{:?}", fields[0])))?;
    let (addr, bus_port) = parse_address(fields[1]).ok_or_else(|| err("address", format!("{:?}", fields[1])))?;
    let mut flags = NodeFlags::default();
    let mut is_replica = false;
    for flag in fields[2].split(',') {
        match flag {
            "myself" => flags.myself = true,
            "fail" => flags.fail = true,
            "fail?" => flags.pfail = true,
            "handshake" => flags.handshake = true,
            "noaddr" => flags.noaddr = true,
            "nofailover" => flags.nofailover = true,
            "slave" | "replica" => is_replica = true,
            _ => {}
        }
    }
    let role = if is_replica { NodeRole::Replica { primary: NodeId::parse(fields[3]) } } else { NodeRole::Primary };
    let config_epoch = fields[6].parse().map_err(|_| err("config-epoch", format!("{:?}", fields[6])))?;
    let link_connected = match fields[7] {
        "connected" => true,
        "disconnected" => false,
        other => return Err(err("link-state", format!("{other:?}"))),
    };
    let mut slots = Vec::new();
    for item in &fields[FIXED_FIELDS..] {
        // `[slot->-id]` and `[slot-<-id]` mark a legacy migration: the slot is still owned as
        // listed elsewhere on the line, so the marker carries no ownership.
        if item.starts_with('[') {
            continue;
        }
        slots.push(parse_slot_range_text(item).ok_or_else(|| err("slots", format!("{item:?}")))?);
    }
    Ok(ClusterNode { id, addr, bus_port, role, flags, config_epoch, link_connected, slots })
}

/// `ip:port@busport[,hostname]` → (address, bus port); `:0@0` (no address yet) → (None, 0).
fn parse_address(text: &str) -> Option<(Option<NodeAddr>, u16)> {
    let text = text.split(',').next()?;
    let (host_port, bus) = text.split_once('@')?;
    let bus_port = bus.parse().ok()?;
    let (host, port) = host_port.rsplit_once(':')?;
    let port: u16 = port.parse().ok()?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() || port == 0 {
        return Some((None, bus_port));
    }
    Some((Some(NodeAddr::new(host, port)), bus_port))
}

/// The fields of `CLUSTER INFO` lb looks at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterInfo {
    /// `cluster_state:ok`.
    pub state_ok: bool,
    pub slots_assigned: u32,
    pub slots_ok: u32,
    pub known_nodes: u32,
    /// Number of primaries serving at least one slot.
    pub size: u32,
    pub current_epoch: u64,
}

/// Parses the reply of `CLUSTER INFO`.
pub fn parse_cluster_info(value: &Value) -> Result<ClusterInfo, ParseError> {
    const COMMAND: &str = "CLUSTER INFO";
    let text = as_text(value)
        .ok_or_else(|| ParseError::new(COMMAND, "reply", format!("expected a string, got {}", describe(value))))?;
    let fields: BTreeMap<&str, &str> = text.lines().filter_map(|line| line.trim_end().split_once(':')).collect();
    let get = |name: &str| fields.get(name).copied().ok_or_else(|| ParseError::new(COMMAND, name, "missing"));
    fn number<T: std::str::FromStr>(name: &str, raw: &str) -> Result<T, ParseError> {
        raw.parse().map_err(|_| ParseError::new("CLUSTER INFO", name, format!("{raw:?}")))
    }
    Ok(ClusterInfo {
        state_ok: get("cluster_state")? == "ok",
        slots_assigned: number("cluster_slots_assigned", get("cluster_slots_assigned")?)?,
        slots_ok: number("cluster_slots_ok", get("cluster_slots_ok")?)?,
        known_nodes: number("cluster_known_nodes", get("cluster_known_nodes")?)?,
        size: number("cluster_size", get("cluster_size")?)?,
        current_epoch: number("cluster_current_epoch", get("cluster_current_epoch")?)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reply::fixtures::parse;

    fn id(text: &str) -> NodeId {
        NodeId::parse(text).expect("valid id")
    }

    #[test]
    fn parses_myid() {
        let parsed = parse_myid(&parse(include_bytes!("../fixtures/cluster_myid.resp"))).expect("valid");
        assert_eq!(parsed, id("80052a6df7ef006688adbcc45e6347e9176598d8"));
        assert!(parse_myid(&Value::BulkString(b"short".to_vec())).is_err());
    }

    #[test]
    fn parses_a_healthy_cluster() {
        let nodes = parse_cluster_nodes(&parse(include_bytes!("../fixtures/cluster_nodes.resp"))).expect("valid");
        assert_eq!(nodes.len(), 3);
        assert!(nodes.iter().all(|n| n.is_healthy() && n.is_primary()));
        let me = nodes.iter().find(|n| n.flags.myself).expect("one line is myself");
        assert_eq!(me.id, id("95d28e2b170b8637d95b9fce05bf87b0bb3d9f28"));
        assert_eq!(me.addr, Some(NodeAddr::new("127.0.0.1", 7001)));
        assert_eq!(me.bus_port, 17001);
        assert_eq!(me.config_epoch, 5);
        assert_eq!(
            me.slots.iter().map(ToString::to_string).collect::<Vec<_>>(),
            ["0-5460", "11002-11003", "12182-12182"]
        );
        assert_eq!(nodes.iter().map(ClusterNode::slot_count).sum::<u32>(), 16_384);
    }

    #[test]
    fn a_killed_node_shows_fail_and_a_down_link() {
        let nodes = parse_cluster_nodes(&parse(include_bytes!("../fixtures/cluster_nodes_with_failed_node.resp")))
            .expect("valid");
        let dead = nodes.iter().find(|n| n.id == id("1888b4ca40d7e66ad86db1de65bd28b880945e1b")).expect("listed");
        assert!(dead.flags.fail && !dead.link_connected && !dead.is_healthy());
        assert_eq!(dead.slot_count(), 5462 + 2 + 6);
        assert_eq!(nodes.iter().filter(|n| n.is_healthy()).count(), 2);
    }

    #[test]
    fn parses_replicas_pfail_noaddr_and_migration_markers() {
        let text = "\
            aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa 10.0.0.1:6379@16379,host-a myself,master - 0 0 3 connected 0-10 [11->-bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb]\n\
            bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb :0@0 slave,fail?,noaddr aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa 0 0 3 disconnected\n";
        let nodes = parse_cluster_nodes(&Value::BulkString(text.as_bytes().to_vec())).expect("valid");
        assert_eq!(nodes[0].slots.len(), 1);
        assert_eq!(nodes[0].addr, Some(NodeAddr::new("10.0.0.1", 6379)));
        assert_eq!(nodes[1].role, NodeRole::Replica { primary: Some(id("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa")) });
        assert!(nodes[1].flags.pfail && nodes[1].flags.noaddr && nodes[1].addr.is_none());
    }

    #[test]
    fn a_bad_line_names_the_field() {
        let text = "95d28e2b170b8637d95b9fce05bf87b0bb3d9f28 127.0.0.1:7001@17001 master - 0 0 x connected\n";
        let error = parse_cluster_nodes(&Value::BulkString(text.as_bytes().to_vec())).expect_err("bad epoch");
        assert_eq!(error.field, "line 0 config-epoch");
    }

    #[test]
    fn parses_cluster_info() {
        let info = parse_cluster_info(&parse(include_bytes!("../fixtures/cluster_info.resp"))).expect("valid");
        assert_eq!(
            info,
            ClusterInfo {
                state_ok: true,
                slots_assigned: 16_384,
                slots_ok: 16_384,
                known_nodes: 3,
                size: 3,
                current_epoch: 5
            }
        );
    }
}
