//! Node ids and addresses.

use std::fmt;

/// A cluster node's id: 40 lowercase hex characters, chosen by the node on its first start and
/// kept in its `nodes.conf` across restarts.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeId(String);

/// Length of a node id in hex characters (a SHA-1 sized random name).
pub const NODE_ID_LEN: usize = 40;

impl NodeId {
    /// `text` as a node id, or `None` unless it is exactly 40 hex characters.
    pub fn parse(text: &str) -> Option<Self> {
        (text.len() == NODE_ID_LEN && text.bytes().all(|b| b.is_ascii_hexdigit()))
            .then(|| Self(text.to_ascii_lowercase()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Where a node serves clients: host (an IP in practice) and port.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeAddr {
    pub host: String,
    pub port: u16,
}

impl NodeAddr {
    pub fn new(host: impl Into<String>, port: u16) -> Self {
        Self { host: host.into(), port }
    }
}

impl fmt::Display for NodeAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_ids_are_forty_hex_characters() {
        assert!(NodeId::parse("95d28e2b170b8637d95b9fce05bf87b0bb3d9f28").is_some());
        assert!(NodeId::parse("95d28e2b").is_none());
        assert!(NodeId::parse("zzd28e2b170b8637d95b9fce05bf87b0bb3d9f28").is_none());
        assert_eq!(NodeAddr::new("127.0.0.1", 7001).to_string(), "127.0.0.1:7001");
        assert_eq!(NodeAddr::new("::1", 7001).to_string(), "[::1]:7001");
    }
}
