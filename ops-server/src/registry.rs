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
    warnings: Vec<String>,
}

#[derive(Debug, Default)]
pub struct Registry {
    agents: RwLock<BTreeMap<WorkerId, Entry>>,
}

/// A registration refused: the worker id belongs to a live agent at another address.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "worker {worker_id} is registered at {live_address} and heartbeating (last {since_ms} ms ago); \
     register at another address after {down_after_ms} ms without heartbeats"
)]
pub struct Taken {
    pub worker_id: WorkerId,
    pub live_address: String,
    pub since_ms: i64,
    pub down_after_ms: u64,
}

/// What a heartbeat found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Beat {
    Ok,
    /// No entry: register again.
    Unknown,
    /// The worker id is registered at another address.
    Elsewhere {
        registered_address: String,
    },
}

impl Registry {
    /// Adds or replaces the agent: a restarted agent registers again at its address, and an
    /// agent that moved registers at its new one once the old registration is down. A live
    /// registration (heartbeats within `down_after_ms`) at another address is refused, so one
    /// caller cannot redirect another agent's collection to itself.
    /// `warnings` say what in its config does not fit the topology; they are listed with it.
    pub fn register(
        &self,
        req: RegisterRequest,
        warnings: Vec<String>,
        now_ms: i64,
        down_after_ms: u64,
    ) -> Result<(), Taken> {
        let mut agents = self.agents.write().expect("registry lock is never poisoned");
        if let Some(live) = agents.get(&req.worker_id) {
            let since_ms = now_ms.saturating_sub(live.last_heartbeat_ms);
            if live.address != req.address && since_ms <= down_after_ms as i64 {
                return Err(Taken {
                    worker_id: req.worker_id,
                    live_address: live.address.clone(),
                    since_ms,
                    down_after_ms,
                });
            }
        }
        let entry = Entry {
            address: req.address,
            version: req.version,
            registered_at_ms: now_ms,
            last_heartbeat_ms: now_ms,
            latest_cursor: Cursor(0),
            warnings,
        };
        agents.insert(req.worker_id, entry);
        Ok(())
    }

    /// Refreshes the agent's entry; an unknown worker must register again, and a heartbeat
    /// from another address than the registered one refreshes nothing (the id belongs to
    /// whoever registered it last: its own heartbeats keep it, not another agent's).
    pub fn heartbeat(&self, beat: &HeartbeatRequest, now_ms: i64) -> Beat {
        let mut agents = self.agents.write().expect("registry lock is never poisoned");
        match agents.get_mut(&beat.worker_id) {
            Some(entry) if beat.address.as_ref().is_some_and(|a| *a != entry.address) => {
                Beat::Elsewhere { registered_address: entry.address.clone() }
            }
            Some(entry) => {
                entry.last_heartbeat_ms = now_ms;
                entry.latest_cursor = beat.latest_cursor;
                Beat::Ok
            }
            None => Beat::Unknown,
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
                warnings: e.warnings.clone(),
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
        r.register(
            RegisterRequest { worker_id: w.clone(), address: "http://a".into(), version: "1".into(), tenant: None },
            Vec::new(),
            1_000,
            10_000,
        )
        .expect("new id");
        assert_eq!(r.list(5_000, 10_000)[0].state, AgentState::Up);
        assert_eq!(r.list(11_001, 10_000)[0].state, AgentState::Down);
        assert_eq!(
            r.heartbeat(&HeartbeatRequest { worker_id: w.clone(), latest_cursor: Cursor(9), address: None }, 11_500),
            Beat::Ok
        );
        let a = &r.list(11_600, 10_000)[0];
        assert_eq!((a.state, a.latest_cursor), (AgentState::Up, Cursor(9)));
        let unknown =
            HeartbeatRequest { worker_id: "w-2".parse().expect("id"), latest_cursor: Cursor(0), address: None };
        assert_eq!(r.heartbeat(&unknown, 1), Beat::Unknown);
    }

    /// Issue 17 item 12: re-registering a live worker id at another address redirected its
    /// collection there.
    #[test]
    fn a_live_id_cannot_be_taken_over_from_another_address() {
        let r = Registry::default();
        let req = |address: &str| RegisterRequest {
            worker_id: "w-1".parse().expect("id"),
            address: address.into(),
            version: "1".into(),
            tenant: None,
        };
        r.register(req("http://real:7101"), Vec::new(), 1_000, 10_000).expect("new id");
        let taken = r.register(req("http://evil:7101"), Vec::new(), 5_000, 10_000).expect_err("live elsewhere");
        assert_eq!(taken.live_address, "http://real:7101");
        assert!(taken.to_string().contains("http://real:7101"), "{taken}");
        assert_eq!(r.list(5_000, 10_000)[0].address, "http://real:7101", "nothing changed");
        r.register(req("http://real:7101"), Vec::new(), 6_000, 10_000).expect("a restart at the same address");
        // Once the old registration is down, the agent may come back elsewhere.
        r.register(req("http://moved:7101"), Vec::new(), 16_001, 10_000).expect("old one is down");
        assert_eq!(r.list(16_001, 10_000)[0].address, "http://moved:7101");
        // The agent at the old address comes back: its heartbeats do not keep the new entry
        // alive, they are told where the id is registered.
        let beat = |address: &str| HeartbeatRequest {
            worker_id: "w-1".parse().expect("id"),
            latest_cursor: Cursor(5),
            address: Some(address.into()),
        };
        let told = r.heartbeat(&beat("http://real:7101"), 20_000);
        assert_eq!(told, Beat::Elsewhere { registered_address: "http://moved:7101".into() });
        assert_eq!(r.list(26_002, 10_000)[0].state, AgentState::Down, "not refreshed by the other agent");
        assert_eq!(r.heartbeat(&beat("http://moved:7101"), 26_500), Beat::Ok);
    }
}
