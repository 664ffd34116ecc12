//! The agent registry: who is there, where to reach them, and whether they still heartbeat.

use std::collections::BTreeMap;
use std::sync::RwLock;

use lb_common::ids::WorkerId;
use lb_common::protocol::{AgentInfo, AgentState, Cursor, HeartbeatRequest, RegisterRequest};

#[derive(Debug, Clone)]
struct Entry {
    address: String,
    version: String,
    registered_at_ms: i64,
    last_heartbeat_ms: i64,
    latest_cursor: Cursor,
}

#[derive(Debug, Default)]
pub struct Registry {
    agents: RwLock<BTreeMap<WorkerId, Entry>>,
}

impl Registry {
    /// Adds or replaces the agent (a restarted agent registers again).
    pub fn register(&self, req: RegisterRequest, now_ms: i64) {
        let entry = Entry {
            address: req.address,
            version: req.version,
            registered_at_ms: now_ms,
            last_heartbeat_ms: now_ms,
            latest_cursor: Cursor(0),
        };
        self.agents.write().expect("registry lock is never poisoned").insert(req.worker_id, entry);
    }

    /// `false` for an agent the registry does not know (it must register again).
    pub fn heartbeat(&self, beat: &HeartbeatRequest, now_ms: i64) -> bool {
        let mut agents = self.agents.write().expect("registry lock is never poisoned");
        match agents.get_mut(&beat.worker_id) {
            Some(entry) => {
                entry.last_heartbeat_ms = now_ms;
                entry.latest_cursor = beat.latest_cursor;
                true
            }
            None => false,
        }
    }

    /// Every agent with its state as of `now_ms`.
    pub fn list(&self, now_ms: i64, down_after_ms: u64) -> Vec<AgentInfo> {
        let agents = self.agents.read().expect("registry lock is never poisoned");
        let list: Vec<AgentInfo> = agents
            .iter()
            .map(|(id, e)| AgentInfo {
                worker_id: id.clone(),
                address: e.address.clone(),
                version: e.version.clone(),
                state: if now_ms.saturating_sub(e.last_heartbeat_ms) > down_after_ms as i64 {
                    AgentState::Down
                } else {
                    AgentState::Up
                },
                registered_at_ms: e.registered_at_ms,
                last_heartbeat_ms: e.last_heartbeat_ms,
                latest_cursor: e.latest_cursor,
            })
            .collect();
        let up = list.iter().filter(|a| a.state == AgentState::Up).count();
        metrics::gauge!("lb_ops_agents", "state" => "up").set(up as f64);
        metrics::gauge!("lb_ops_agents", "state" => "down").set((list.len() - up) as f64);
        list
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agents_go_down_without_heartbeats_and_come_back() {
        let r = Registry::default();
        let w: WorkerId = "w-1".parse().expect("id");
        r.register(RegisterRequest { worker_id: w.clone(), address: "http://a".into(), version: "1".into() }, 1_000);
        assert_eq!(r.list(5_000, 10_000)[0].state, AgentState::Up);
        assert_eq!(r.list(11_001, 10_000)[0].state, AgentState::Down);
        assert!(r.heartbeat(&HeartbeatRequest { worker_id: w.clone(), latest_cursor: Cursor(9) }, 11_500));
        let a = &r.list(11_600, 10_000)[0];
        assert_eq!((a.state, a.latest_cursor), (AgentState::Up, Cursor(9)));
        let unknown = HeartbeatRequest { worker_id: "w-2".parse().expect("id"), latest_cursor: Cursor(0) };
        assert!(!r.heartbeat(&unknown, 1));
    }
}
