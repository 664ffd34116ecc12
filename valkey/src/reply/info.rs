//! `INFO` (default sections).
//!
//! Reply on valkey-server 9.1.2: one bulk string of `\r\n`-separated lines, `# Section` headers,
//! `field:value` lines and blank lines between sections (about 250 lines, 6.4 KB):
//!
//! ```text
//! # Server
//! redis_version:7.2.4            Valkey reports the Redis version it is compatible with here
//! server_name:valkey
//! valkey_version:9.1.2           absent on Redis
//! server_mode:cluster
//! run_id:1f2a223f...             changes on every start: the restart signal
//! uptime_in_seconds:142
//! # Memory
//! used_memory:2989136            bytes
//! maxmemory:0                    bytes, 0 = no limit
//! # Stats
//! total_commands_processed:56
//! total_net_input_bytes:3750
//! total_net_output_bytes:17766
//! # CPU
//! used_cpu_sys:0.119829          seconds of system CPU since start (float)
//! used_cpu_user:0.060911         seconds of user CPU since start (float)
//! used_cpu_sys_main_thread:0.120414     the main thread's share of the two above (Valkey;
//! used_cpu_user_main_thread:0.060193    Redis ≥ 7.0 has them too)
//! used_active_time_main_thread:0.040666 seconds the main thread spent handling events, not
//!                                       waiting in epoll (Valkey ≥ 8.1): its busy time
//! # Keyspace
//! db0:keys=15,expires=0,avg_ttl=0,keys_with_volatile_items=0
//! ```
//!
//! Cluster mode has only `db0`; the Keyspace section is empty while the node holds no key.

use std::collections::BTreeMap;

use redis::Value;

use super::{ParseError, as_text, describe};

const COMMAND: &str = "INFO";

/// The INFO fields lb uses. Counters are cumulative since the process started (`run_id`).
#[derive(Debug, Clone, PartialEq)]
pub struct Info {
    /// `redis_version`: the Redis version (Valkey reports 7.2.4, the last Redis it forked).
    pub redis_version: String,
    /// `valkey_version`, absent on Redis.
    pub valkey_version: Option<String>,
    /// `run_id`: a new random id on every start, so a change means the counters restarted.
    pub run_id: String,
    pub uptime_secs: u64,
    pub used_cpu_user_secs: f64,
    pub used_cpu_sys_secs: f64,
    /// `used_cpu_user_main_thread + used_cpu_sys_main_thread`: CPU seconds of the thread that
    /// executes every command. `None` on servers without the fields.
    pub main_thread_cpu_secs: Option<f64>,
    /// `used_active_time_main_thread` (Valkey ≥ 8.1): seconds the main thread spent handling
    /// events rather than waiting for them, i.e. its busy time. `None` on older servers.
    pub main_thread_active_secs: Option<f64>,
    pub total_commands_processed: u64,
    pub used_memory_bytes: u64,
    /// `maxmemory`: 0 means no limit.
    pub maxmemory_bytes: u64,
    pub total_net_input_bytes: u64,
    pub total_net_output_bytes: u64,
    /// `total_net_cluster_slot_import_bytes` (Valkey 9+): bytes received by atomic slot
    /// migrations. The keys an import writes count as commands in `total_commands_processed`
    /// (one `SET` per key, checked on 9.1.2) while no owned slot's CPU shows them, so a rise
    /// here marks an interval whose command count is not client load. `None` on older servers.
    pub total_net_cluster_slot_import_bytes: Option<u64>,
    /// The `# Keyspace` lines, one per database holding keys.
    pub keyspace: Vec<KeyspaceDb>,
}

/// One `dbN:keys=..,expires=..,avg_ttl=..` line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyspaceDb {
    pub db: u32,
    pub keys: u64,
    pub expires: u64,
    pub avg_ttl_ms: u64,
}

/// Which counter [`Info::main_thread_busy_secs`] read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BusySource {
    /// `used_active_time_main_thread`.
    ActiveTime,
    /// `used_cpu_user_main_thread + used_cpu_sys_main_thread`.
    MainThreadCpu,
    /// `used_cpu_user + used_cpu_sys`: the whole process (background and I/O threads included).
    ProcessCpu,
}

impl Info {
    /// The main thread's busy seconds since start, from the best counter the server has: its
    /// active time, else its CPU time, else the whole process's CPU time. A Valkey primary
    /// executes every command on that one thread, so this over time is the node's load on a
    /// capacity of one core. Compare two readings only when their sources match.
    pub fn main_thread_busy_secs(&self) -> (f64, BusySource) {
        match (self.main_thread_active_secs, self.main_thread_cpu_secs) {
            (Some(active), _) => (active, BusySource::ActiveTime),
            (None, Some(cpu)) => (cpu, BusySource::MainThreadCpu),
            (None, None) => (self.used_cpu_user_secs + self.used_cpu_sys_secs, BusySource::ProcessCpu),
        }
    }

    /// Keys over all databases.
    pub fn total_keys(&self) -> u64 {
        self.keyspace.iter().map(|db| db.keys).sum()
    }
}

/// Parses an `INFO` reply (a bulk or verbatim string).
pub fn parse_info(value: &Value) -> Result<Info, ParseError> {
    let text = as_text(value)
        .ok_or_else(|| ParseError::new(COMMAND, "reply", format!("expected a string, got {}", describe(value))))?;
    parse_info_text(text)
}

fn parse_info_text(text: &str) -> Result<Info, ParseError> {
    let mut fields = BTreeMap::new();
    let mut keyspace = Vec::new();
    let mut section = "";
    for line in text.lines().map(str::trim_end) {
        if let Some(name) = line.strip_prefix("# ") {
            section = name;
            continue;
        }
        let Some((key, value)) = line.split_once(':') else { continue };
        if section == "Keyspace" {
            keyspace.push(parse_keyspace_line(key, value)?);
        } else {
            fields.insert(key, value);
        }
    }
    let text_field =
        |name: &str| fields.get(name).map(|v| (*v).to_owned()).ok_or_else(|| ParseError::new(COMMAND, name, "missing"));
    let u64_field = |name: &str| -> Result<u64, ParseError> {
        let raw = fields.get(name).ok_or_else(|| ParseError::new(COMMAND, name, "missing"))?;
        raw.parse().map_err(|_| ParseError::new(COMMAND, name, format!("not an unsigned integer: {raw:?}")))
    };
    let secs_field = |name: &str| -> Result<f64, ParseError> {
        let raw = fields.get(name).ok_or_else(|| ParseError::new(COMMAND, name, "missing"))?;
        match raw.parse::<f64>() {
            Ok(secs) if secs.is_finite() && secs >= 0.0 => Ok(secs),
            _ => Err(ParseError::new(COMMAND, name, format!("not a non-negative number: {raw:?}"))),
        }
    };
    Ok(Info {
        redis_version: text_field("redis_version")?,
        valkey_version: fields.get("valkey_version").map(|v| (*v).to_owned()),
        run_id: text_field("run_id")?,
        uptime_secs: u64_field("uptime_in_seconds")?,
        used_cpu_user_secs: secs_field("used_cpu_user")?,
        used_cpu_sys_secs: secs_field("used_cpu_sys")?,
        main_thread_cpu_secs: match (
            optional(&fields, "used_cpu_user_main_thread", secs_field)?,
            optional(&fields, "used_cpu_sys_main_thread", secs_field)?,
        ) {
            (Some(user), Some(sys)) => Some(user + sys),
            _ => None,
        },
        main_thread_active_secs: optional(&fields, "used_active_time_main_thread", secs_field)?,
        total_commands_processed: u64_field("total_commands_processed")?,
        used_memory_bytes: u64_field("used_memory")?,
        maxmemory_bytes: u64_field("maxmemory")?,
        total_net_input_bytes: u64_field("total_net_input_bytes")?,
        total_net_output_bytes: u64_field("total_net_output_bytes")?,
        total_net_cluster_slot_import_bytes: optional(&fields, "total_net_cluster_slot_import_bytes", u64_field)?,
        keyspace,
    })
}

/// `field` parsed by `parse` when the reply has it, `None` when it does not.
fn optional<T>(
    fields: &BTreeMap<&str, &str>,
    field: &str,
    parse: impl Fn(&str) -> Result<T, ParseError>,
) -> Result<Option<T>, ParseError> {
    fields.contains_key(field).then(|| parse(field)).transpose()
}

fn parse_keyspace_line(key: &str, value: &str) -> Result<KeyspaceDb, ParseError> {
    let field = format!("keyspace {key}");
    let db = key
        .strip_prefix("db")
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| ParseError::new(COMMAND, field.clone(), "expected dbN"))?;
    let (mut keys, mut expires, mut avg_ttl_ms) = (None, None, 0);
    for item in value.split(',') {
        let Some((name, number)) = item.split_once('=') else { continue };
        let parsed = || -> Result<u64, ParseError> {
            number.parse().map_err(|_| ParseError::new(COMMAND, format!("{field} {name}"), format!("{number:?}")))
        };
        match name {
            "keys" => keys = Some(parsed()?),
            "expires" => expires = Some(parsed()?),
            "avg_ttl" => avg_ttl_ms = parsed()?,
            _ => {}
        }
    }
    Ok(KeyspaceDb {
        db,
        keys: keys.ok_or_else(|| ParseError::new(COMMAND, format!("{field} keys"), "missing"))?,
        expires: expires.ok_or_else(|| ParseError::new(COMMAND, format!("{field} expires"), "missing"))?,
        avg_ttl_ms,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reply::fixtures::parse;

    #[test]
    fn parses_captured_info() {
        let info = parse_info(&parse(include_bytes!("../fixtures/info.resp"))).expect("valid reply");
        assert_eq!(info.redis_version, "7.2.4");
        assert_eq!(info.valkey_version.as_deref(), Some("9.1.2"));
        assert_eq!(info.run_id, "1f2a223fd08eceb3b79d4b0d0d8e5ff86cd99533");
        assert_eq!(info.uptime_secs, 142);
        assert_eq!(info.used_cpu_user_secs, 0.060911);
        assert_eq!(info.used_cpu_sys_secs, 0.119829);
        assert_eq!(info.main_thread_cpu_secs, Some(0.060193 + 0.120414));
        assert_eq!(info.main_thread_active_secs, Some(0.040666));
        assert_eq!(info.main_thread_busy_secs(), (0.040666, BusySource::ActiveTime));
        assert_eq!(info.total_commands_processed, 56);
        assert_eq!(info.used_memory_bytes, 2_989_136);
        assert_eq!(info.maxmemory_bytes, 0);
        assert_eq!(info.total_net_input_bytes, 3750);
        assert_eq!(info.total_net_output_bytes, 17_766);
        assert_eq!(info.total_net_cluster_slot_import_bytes, Some(436), "in the default INFO of 9.1.2");
        assert_eq!(info.keyspace, [KeyspaceDb { db: 0, keys: 15, expires: 0, avg_ttl_ms: 0 }]);
        assert_eq!(info.total_keys(), 15);
    }

    #[test]
    fn redis_without_valkey_version_and_an_empty_keyspace_parse() {
        let text = "# Server\r\nredis_version:7.2.4\r\nrun_id:abc\r\nuptime_in_seconds:1\r\n\
            # Memory\r\nused_memory:10\r\nmaxmemory:100\r\n# Stats\r\ntotal_commands_processed:2\r\n\
            total_net_input_bytes:3\r\ntotal_net_output_bytes:4\r\n# CPU\r\nused_cpu_sys:0.5\r\n\
            used_cpu_user:1.25\r\n\r\n# Keyspace\r\n";
        let info = parse_info(&Value::BulkString(text.as_bytes().to_vec())).expect("valid");
        assert_eq!(info.valkey_version, None);
        assert_eq!(info.total_net_cluster_slot_import_bytes, None);
        assert!(info.keyspace.is_empty());
        assert_eq!((info.used_cpu_user_secs, info.maxmemory_bytes), (1.25, 100));
        assert_eq!(info.main_thread_busy_secs(), (1.75, BusySource::ProcessCpu), "no main-thread fields: the process");
        let with_cpu = text.replace(
            "used_cpu_user:1.25\r\n",
            "used_cpu_user:1.25\r\nused_cpu_sys_main_thread:0.25\r\nused_cpu_user_main_thread:1\r\n",
        );
        let info = parse_info(&Value::BulkString(with_cpu.into_bytes())).expect("valid");
        assert_eq!(info.main_thread_busy_secs(), (1.25, BusySource::MainThreadCpu));
    }

    #[test]
    fn a_missing_or_bad_field_is_named() {
        let error = parse_info(&Value::BulkString(b"# Server\r\nredis_version:7\r\n".to_vec())).expect_err("missing");
        assert_eq!(error.field, "run_id");
        let text = "redis_version:7\r\nrun_id:a\r\nuptime_in_seconds:x\r\n";
        let error = parse_info(&Value::BulkString(text.as_bytes().to_vec())).expect_err("bad");
        assert_eq!(error.field, "uptime_in_seconds");
        assert!(parse_info(&Value::Int(3)).is_err());
    }
}
