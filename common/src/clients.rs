//! Typed clients for the APIs of the master, the ops server and the agent: one method per route,
//! the route's query and reply types from [`crate::protocol`], so no caller writes a path or a
//! body by hand. Each wraps an [`HttpClient`] (timeouts, bearer token, error classes) and hands
//! it back with `http()` for the shared endpoints (`/ready`, `/v1/config/status`).
//!
//! ```no_run
//! # async fn f() -> Result<(), lb_common::http::ClientError> {
//! use lb_common::clients::MasterClient;
//! use lb_common::config::shared::HttpClientConfig;
//! use lb_common::protocol::{Evaluation, RecordsQuery, TopQuery};
//!
//! let master = MasterClient::new("http://127.0.0.1:7300", &HttpClientConfig::default());
//! let top = master.top(&TopQuery { n: Some(10), ..TopQuery::default() }).await?;
//! let evaluations = master.records::<Evaluation>(&RecordsQuery::default()).await?;
//! # Ok(()) }
//! ```

use crate::config::shared::HttpClientConfig;
use crate::config::watch::ReloadStatus;
use crate::http::{ClientError, Conditional, HttpClient};
use crate::ids::{ActionId, PartitionId};
use crate::protocol::*;

/// Percent-encodes one path segment (ids are validated to a safe alphabet, but a caller's
/// string need not be).
fn segment(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    for b in raw.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

macro_rules! client_type {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone)]
        pub struct $name {
            http: HttpClient,
        }

        impl $name {
            pub fn new(base_url: impl Into<String>, config: &HttpClientConfig) -> Self {
                Self { http: HttpClient::new(base_url, config) }
            }

            /// Wraps a configured client (bearer token, deadline, shared pool).
            pub fn from_http(http: HttpClient) -> Self {
                Self { http }
            }

            /// Sends `Authorization: Bearer <token>` with every request.
            pub fn with_bearer_token(self, token: impl Into<String>) -> Self {
                Self { http: self.http.with_bearer_token(token) }
            }

            /// The underlying client, for the endpoints every binary serves.
            pub fn http(&self) -> &HttpClient {
                &self.http
            }

            /// `GET /v1/config/status`: the live config's version and the last reload attempt.
            pub async fn config_status(&self) -> Result<ReloadStatus, ClientError> {
                self.http.get("/v1/config/status").await
            }
        }
    };
}

client_type!(
    /// The master's API (`/api/v1`, see `docs/protocol.md` "Master read API").
    MasterClient
);

impl MasterClient {
    pub async fn overview(&self, query: &OverviewQuery) -> Result<ClusterOverview, ClientError> {
        self.http.get_with_query("/api/v1/overview", query).await
    }

    pub async fn workers(&self, query: &WindowQuery) -> Result<Vec<WorkerRow>, ClientError> {
        self.http.get_with_query("/api/v1/workers", query).await
    }

    pub async fn partitions(&self, query: &PartitionsQuery) -> Result<Vec<PartitionRow>, ClientError> {
        self.http.get_with_query("/api/v1/partitions", query).await
    }

    pub async fn history(&self, partition: &PartitionId, query: &HistoryQuery) -> Result<History, ClientError> {
        let path = format!("/api/v1/partitions/{}/history", segment(partition.as_str()));
        self.http.get_with_query(&path, query).await
    }

    pub async fn top(&self, query: &TopQuery) -> Result<TopN, ClientError> {
        self.http.get_with_query("/api/v1/top", query).await
    }

    pub async fn heatmap(&self, query: &HeatmapQuery) -> Result<Heatmap, ClientError> {
        self.http.get_with_query("/api/v1/heatmap", query).await
    }

    /// The topology as the master last read it (503 `no_topology` before the first read).
    pub async fn topology(&self) -> Result<Topology, ClientError> {
        self.http.get("/api/v1/topology").await
    }

    pub async fn collector(&self) -> Result<CollectorStatus, ClientError> {
        self.http.get("/api/v1/collector").await
    }

    pub async fn table_memory(&self) -> Result<MemoryUsage, ClientError> {
        self.http.get("/api/v1/table/memory").await
    }

    /// The newest records of one kind, typed by its body: `records::<Evaluation>(..)`.
    pub async fn records<T: RecordBody>(&self, query: &RecordsQuery) -> Result<Vec<StoredRecord<T>>, ClientError> {
        let path = format!("/api/v1/records/{}", T::KIND.as_str());
        let reply: RecordsResponse<T> = self.http.get_with_query(&path, query).await?;
        Ok(reply.records)
    }

    /// One record (404 if there is none under `key`).
    pub async fn record<T: RecordBody>(&self, key: &str) -> Result<StoredRecord<T>, ClientError> {
        self.http.get(&format!("/api/v1/records/{}/{}", T::KIND.as_str(), segment(key))).await
    }

    pub async fn pending(&self) -> Result<Vec<Pending>, ClientError> {
        let reply: PendingResponse = self.http.get("/api/v1/proposals/pending").await?;
        Ok(reply.proposals)
    }

    /// Approves a pending dry-run proposal (needs an `operator` token); the reply is the ops
    /// server's record of the submitted action.
    pub async fn approve(&self, proposal_id: &ActionId) -> Result<ActionRecord, ClientError> {
        let path = format!("/api/v1/proposals/{}/approve", segment(proposal_id.as_str()));
        self.http.post(&path, &serde_json::json!({})).await
    }

    /// Refuses a pending dry-run proposal: it is dropped and not offered again for the
    /// approval TTL (needs an `operator` token). The reply is the proposal as it was pending.
    pub async fn reject(&self, proposal_id: &ActionId) -> Result<Pending, ClientError> {
        let path = format!("/api/v1/proposals/{}/reject", segment(proposal_id.as_str()));
        self.http.post(&path, &serde_json::json!({})).await
    }

    /// An action by hand, through the master (tracked and evaluated); `dry_run` only predicts.
    pub async fn submit_manual(&self, request: &ManualActionRequest) -> Result<ManualActionReply, ClientError> {
        self.http.post("/api/v1/actions", request).await
    }

    pub async fn placement_rules(&self) -> Result<PlacementRules, ClientError> {
        self.http.get("/api/v1/placement/rules").await
    }

    /// The live policy config, its version, source file and last reload outcome.
    pub async fn policy(&self) -> Result<PolicyStatus, ClientError> {
        self.http.get("/api/v1/policy").await
    }

    /// The latest online pass as published.
    pub async fn pass(&self) -> Result<PassSnapshot, ClientError> {
        self.http.get("/api/v1/pass").await
    }

    pub async fn leadership(&self) -> Result<LeadershipStatus, ClientError> {
        self.http.get("/api/v1/leadership").await
    }

    /// The newest offline pass's findings and report.
    pub async fn offline(&self) -> Result<OfflineFindings, ClientError> {
        self.http.get("/api/v1/offline").await
    }

    /// Asks the leader for an offline pass now (needs an `operator` token).
    pub async fn request_offline_pass(&self) -> Result<OfflinePassRequested, ClientError> {
        self.http.post("/api/v1/offline/pass", &serde_json::json!({})).await
    }

    /// Follows the master's event stream (`GET /api/v1/stream`).
    pub async fn stream(&self) -> Result<MasterEvents, ClientError> {
        Ok(MasterEvents {
            url: format!("{}/api/v1/stream", self.http.base_url()),
            inner: self.http.event_stream("/api/v1/stream").await?,
        })
    }

    /// The workers' spread (max, mean, max/mean, CV) per step over a time range.
    pub async fn cluster_history(&self, query: &ClusterHistoryQuery) -> Result<ClusterHistory, ClientError> {
        self.http.get_with_query("/api/v1/cluster/history", query).await
    }

    /// The ops server's actions, through the master, newest first (at most 500).
    pub async fn actions(&self, state: Option<ActionState>) -> Result<Vec<ActionRecord>, ClientError> {
        let reply: ActionsResponse = self.http.get_with_query("/api/v1/actions", &ActionsQuery { state }).await?;
        Ok(reply.actions)
    }

    /// The ops server's halt switch, through the master.
    pub async fn halt_status(&self) -> Result<HaltStatus, ClientError> {
        self.http.get("/api/v1/halt").await
    }

    /// Halts or resumes the ops server's executor through the master (`operator`; the ops
    /// server checks the same token).
    pub async fn set_halt(&self, halted: bool, reason: Option<String>) -> Result<HaltStatus, ClientError> {
        self.http.post("/api/v1/halt", &HaltRequest { halted, reason }).await
    }
}

/// The master's event stream, typed.
#[derive(Debug)]
pub struct MasterEvents {
    url: String,
    inner: crate::http::EventStream,
}

impl MasterEvents {
    /// The next event; `None` when the master ended the stream (it is shutting down). Events of
    /// kinds this client does not know are skipped.
    pub async fn next(&mut self) -> Option<Result<StreamEvent, ClientError>> {
        loop {
            let raw = match self.inner.next().await? {
                Ok(raw) => raw,
                Err(e) => return Some(Err(e)),
            };
            match StreamEvent::parse(&raw.event, &raw.data) {
                Ok(Some(event)) => return Some(Ok(event)),
                Ok(None) => continue,
                Err(e) => {
                    let message = format!("event {}: {e}", raw.event);
                    return Some(Err(ClientError::Decode { url: self.url.clone(), message }));
                }
            }
        }
    }
}

client_type!(
    /// The ops server's API: actions, halt, topology, the agent registry and collection.
    OpsClient
);

impl OpsClient {
    /// Submits an action (idempotent by id: the same request again answers the same record).
    pub async fn submit(&self, request: &ActionRequest) -> Result<ActionRecord, ClientError> {
        self.http.post("/v1/actions", request).await
    }

    pub async fn action(&self, id: &ActionId) -> Result<ActionRecord, ClientError> {
        self.http.get(&format!("/v1/actions/{}", segment(id.as_str()))).await
    }

    /// Every action kept, or those in one state.
    pub async fn actions(&self, state: Option<ActionState>) -> Result<Vec<ActionRecord>, ClientError> {
        let reply: ActionsResponse = self.http.get_with_query("/v1/actions", &ActionsQuery { state }).await?;
        Ok(reply.actions)
    }

    pub async fn events(&self, id: &ActionId) -> Result<Vec<AuditEvent>, ClientError> {
        let reply: EventsResponse = self.http.get(&format!("/v1/actions/{}/events", segment(id.as_str()))).await?;
        Ok(reply.events)
    }

    pub async fn cancel(&self, id: &ActionId) -> Result<ActionRecord, ClientError> {
        self.http.post(&format!("/v1/actions/{}/cancel", segment(id.as_str())), &serde_json::json!({})).await
    }

    /// Announces an elected master's leadership term (needs a `service` token): 409
    /// `stale_epoch` when a newer one has been seen.
    pub async fn announce_epoch(&self, request: &FencingRequest) -> Result<FencingStatus, ClientError> {
        self.http.post("/v1/fencing", request).await
    }

    /// The newest leadership term seen and the submissions refused for an older one.
    pub async fn fencing(&self) -> Result<FencingStatus, ClientError> {
        self.http.get("/v1/fencing").await
    }

    pub async fn halt_status(&self) -> Result<HaltStatus, ClientError> {
        self.http.get("/v1/halt").await
    }

    /// Flips the API halt switch (needs an `operator` token); `reason` is kept with it.
    pub async fn set_halt(&self, halted: bool, reason: Option<String>) -> Result<HaltStatus, ClientError> {
        self.http.post("/v1/halt", &HaltRequest { halted, reason }).await
    }

    /// The storage system's topology, read through the ops server.
    pub async fn topology(&self) -> Result<Topology, ClientError> {
        self.http.get("/v1/topology").await
    }

    /// The topology unless it is still the one tagged `etag` (the `ETag` of an earlier read):
    /// then the ops server answers `304` and sends nothing.
    pub async fn topology_if_changed(&self, etag: Option<&str>) -> Result<Conditional<Topology>, ClientError> {
        self.http.get_if_changed("/v1/topology", etag).await
    }

    pub async fn agents(&self) -> Result<AgentsResponse, ClientError> {
        self.http.get("/v1/agents").await
    }

    pub async fn register(&self, request: &RegisterRequest) -> Result<RegisterResponse, ClientError> {
        self.http.post("/v1/agents/register", request).await
    }

    pub async fn heartbeat(&self, beat: &HeartbeatRequest) -> Result<RegisterResponse, ClientError> {
        self.http.post("/v1/agents/heartbeat", beat).await
    }

    /// One collection round: every registered agent's samples after its cursor.
    pub async fn collect(&self, request: &CollectRequest) -> Result<CollectResponse, ClientError> {
        self.http.post("/v1/collect", request).await
    }

    /// Every agent's hourly rollups of `[from_ms, to_ms)` (`POST /v1/collect/rollups`).
    pub async fn collect_rollups(
        &self,
        request: &RollupsCollectRequest,
    ) -> Result<RollupsCollectResponse, ClientError> {
        self.http.post("/v1/collect/rollups", request).await
    }
}

client_type!(
    /// An agent's API: the worker's report in, samples and rollups out.
    AgentClient
);

impl AgentClient {
    pub async fn report(&self, report: &Report) -> Result<ReportAck, ClientError> {
        self.http.post("/v1/report", report).await
    }

    pub async fn samples(&self, query: &SamplesQuery) -> Result<SamplesResponse, ClientError> {
        self.http.get_with_query("/v1/samples", query).await
    }

    pub async fn rollups(&self, query: &RollupsQuery) -> Result<RollupsResponse, ClientError> {
        self.http.get_with_query("/v1/rollups", query).await
    }
}

#[cfg(test)]
mod tests {
    use super::segment;

    #[test]
    fn path_segments_are_escaped() {
        assert_eq!(segment("a-1_b.c~"), "a-1_b.c~");
        assert_eq!(segment("a/b c"), "a%2Fb%20c");
    }
}
