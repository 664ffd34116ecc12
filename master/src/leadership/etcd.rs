//! Leadership through an etcd election (`[leadership] backend = "etcd"`).
//!
//! One background task ([`EtcdLeadership::run`]) holds a session: connect, grant a lease of
//! `lease_ttl_secs`, keep it alive every third of the TTL, and campaign for the election with
//! this master's advertised URL as the value. etcd makes the candidate whose key has the lowest
//! create revision the leader; [`Leadership::status`] answers from what the task last saw, so
//! the online loop never waits on etcd.
//!
//! **Stepping down before the lease can lapse.** The term is valid until the send time of the
//! last answered keep-alive plus two thirds of the TTL. The server's countdown restarts no
//! earlier than that send, so this master stops acting at least a third of the TTL before etcd
//! could elect another — even if this process was frozen (SIGSTOP, a VM stall): the deadline is
//! read on the monotonic clock at every `status()`, not by the task. A keep-alive that fails or
//! times out ends the session: the term is dropped, the lease revoked when possible, and a new
//! session campaigns with a new lease (so a new term always has a higher epoch).
//!
//! **Fencing.** The epoch is the leader key's create revision. The online loop announces it to
//! the ops server when it takes over and stamps it on every action; when the ops server answers
//! `stale_epoch`, [`Leadership::fenced`] ends the session at once.
//!
//! **Handover.** The leader's memory lives at `<election>.handover` (outside the election's
//! `<election>/` prefix, so it is never a candidate), written in a transaction that compares the
//! leader key's create revision with the epoch: a master that lost the election cannot
//! overwrite its successor's state.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use etcd_client::{Client, Compare, CompareOp, ConnectOptions, ResignOptions, Txn, TxnOp};
use futures_util::future::BoxFuture;
use lb_common::protocol::LeadershipStatus;
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::{Handover, Leadership};
use crate::config::LeadershipConfig;

/// Wait between sessions after a failure: etcd down is retried about twice a second.
const RETRY_AFTER: Duration = Duration::from_millis(500);

#[derive(Debug, thiserror::Error)]
pub enum EtcdError {
    #[error("etcd: {0}")]
    Etcd(#[from] etcd_client::Error),
    #[error("etcd did not answer {0} within the request timeout")]
    Timeout(&'static str),
    #[error("the lease expired on the server")]
    LeaseLost,
    #[error("the ops server refused this master's epoch: a newer leader exists")]
    Fenced,
}

/// A term this master holds.
#[derive(Debug, Clone)]
struct Term {
    epoch: u64,
    key: Vec<u8>,
    valid_until: Instant,
}

#[derive(Default)]
struct View {
    term: Option<Term>,
    /// Who leads as last read from etcd (when this master does not).
    leader_address: Option<String>,
    leader_epoch: Option<u64>,
    client: Option<Client>,
}

impl std::fmt::Debug for View {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("View")
            .field("term", &self.term)
            .field("leader_address", &self.leader_address)
            .field("leader_epoch", &self.leader_epoch)
            .field("connected", &self.client.is_some())
            .finish()
    }
}

#[derive(Debug)]
struct Inner {
    config: LeadershipConfig,
    advertise: String,
    view: Mutex<View>,
    fenced: Notify,
}

/// See the module doc. Cheap to clone (shared state).
#[derive(Debug, Clone)]
pub struct EtcdLeadership {
    inner: Arc<Inner>,
}

impl EtcdLeadership {
    /// `advertise` is this master's URL as others reach it (the election's value).
    pub fn new(config: LeadershipConfig, advertise: String) -> Self {
        Self { inner: Arc::new(Inner { config, advertise, view: Mutex::default(), fenced: Notify::new() }) }
    }

    fn view(&self) -> std::sync::MutexGuard<'_, View> {
        self.inner.view.lock().expect("leadership lock is never poisoned")
    }

    fn handover_key(&self) -> String {
        format!("{}.handover", self.inner.config.election)
    }

    /// Campaigns until `cancel`, one session after another; resigns on the way out.
    pub async fn run(self, cancel: CancellationToken) {
        let mut was_leader = false;
        loop {
            let result = self.session(&cancel, &mut was_leader).await;
            self.end_term(&mut was_leader);
            self.view().client = None;
            match result {
                Ok(()) => return,
                Err(error) => {
                    warn!(%error, "etcd leadership session ended; campaigning again");
                    metrics::counter!("lb_master_leadership_sessions_ended_total").increment(1);
                }
            }
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(RETRY_AFTER) => {}
            }
        }
    }

    fn end_term(&self, was_leader: &mut bool) {
        let ended = self.view().term.take();
        if let Some(term) = ended {
            warn!(epoch = term.epoch, "leadership ended: this master stops acting");
        }
        if *was_leader {
            metrics::counter!("lb_master_leadership_changes_total", "to" => "standby").increment(1);
        }
        *was_leader = false;
        metrics::gauge!("lb_master_leading_masters").set(0.0);
    }

    async fn session(&self, cancel: &CancellationToken, was_leader: &mut bool) -> Result<(), EtcdError> {
        let c = &self.inner.config;
        let (ttl, timeout) = (c.lease_ttl(), c.request_timeout());
        // No per-request timeout on the client (tonic's would also cut `campaign`, which waits
        // for as long as another master leads): every other call is bounded by `within`.
        let options = ConnectOptions::new().with_connect_timeout(c.connect_timeout());
        let mut client =
            within(c.connect_timeout() + timeout, "connect", Client::connect(&c.endpoints, Some(options))).await?;
        let mut renewed = Instant::now();
        let lease = within(timeout, "lease grant", client.lease_grant(c.lease_ttl_secs as i64, None)).await?.id();
        let (mut keeper, mut stream) = within(timeout, "keep-alive", client.lease_keep_alive(lease)).await?;
        self.view().client = Some(client.clone());
        info!(lease, election = %c.election, "campaigning for leadership");
        let mut campaigner = client.clone();
        let (election, advertise) = (c.election.clone(), self.inner.advertise.clone());
        let campaign = campaigner.campaign(election.clone(), advertise, lease);
        tokio::pin!(campaign);
        let mut leader_key: Option<etcd_client::LeaderKey> = None;
        let mut tick = tokio::time::interval(ttl / 3);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let valid_for = ttl * 2 / 3;
        let outcome = loop {
            tokio::select! {
                _ = cancel.cancelled() => break Ok(()),
                _ = self.inner.fenced.notified() => break Err(EtcdError::Fenced),
                _ = tick.tick() => {
                    let sent = Instant::now();
                    let answer = within(timeout, "keep-alive", async {
                        keeper.keep_alive().await?;
                        stream.message().await
                    })
                    .await;
                    match answer {
                        Ok(Some(resp)) if resp.ttl() > 0 => renewed = sent,
                        Ok(_) => break Err(EtcdError::LeaseLost),
                        Err(error) => break Err(error),
                    }
                    if let Some(term) = self.view().term.as_mut() {
                        term.valid_until = renewed + valid_for;
                    }
                    if leader_key.is_none() {
                        self.observe_leader(&mut client).await;
                    }
                }
                result = &mut campaign, if leader_key.is_none() => {
                    let key = result?.take_leader().ok_or(EtcdError::Timeout("campaign (no leader key)"))?;
                    let epoch = key.rev() as u64;
                    info!(epoch, lease, "elected leader: this master acts");
                    metrics::counter!("lb_master_leadership_changes_total", "to" => "leader").increment(1);
                    metrics::gauge!("lb_master_leading_masters").set(1.0);
                    *was_leader = true;
                    {
                        let mut view = self.view();
                        view.term = Some(Term { epoch, key: key.key().to_vec(), valid_until: renewed + valid_for });
                        view.leader_address = Some(self.inner.advertise.clone());
                        view.leader_epoch = Some(epoch);
                    }
                    leader_key = Some(key);
                }
            }
        };
        // Stop acting before telling etcd, then give the election up and the lease back.
        self.end_term(was_leader);
        if let Some(key) = leader_key {
            let _ = within(timeout, "resign", client.resign(Some(ResignOptions::new().with_leader(key)))).await;
        }
        let _ = within(timeout, "lease revoke", client.lease_revoke(lease)).await;
        outcome
    }

    /// Reads who leads now (a standby's answer to "who leads").
    async fn observe_leader(&self, client: &mut Client) {
        let timeout = self.inner.config.request_timeout();
        let read = within(timeout, "leader", client.leader(self.inner.config.election.clone())).await;
        let (address, epoch) = match read {
            Ok(mut resp) => match resp.take_kv() {
                Some(kv) => (Some(String::from_utf8_lossy(kv.value()).into_owned()), Some(kv.create_revision() as u64)),
                None => (None, None),
            },
            // "election: no leader" while nobody holds it; other errors keep the last answer.
            Err(EtcdError::Etcd(e)) if e.to_string().contains("no leader") => (None, None),
            Err(_) => return,
        };
        let mut view = self.view();
        view.leader_address = address;
        view.leader_epoch = epoch;
    }
}

async fn within<T, E: Into<EtcdError>>(
    timeout: Duration,
    what: &'static str,
    call: impl std::future::Future<Output = Result<T, E>>,
) -> Result<T, EtcdError> {
    match tokio::time::timeout(timeout, call).await {
        Ok(result) => result.map_err(Into::into),
        Err(_) => Err(EtcdError::Timeout(what)),
    }
}

impl Leadership for EtcdLeadership {
    fn status(&self) -> LeadershipStatus {
        let view = self.view();
        let term = view.term.as_ref().filter(|t| t.valid_until > Instant::now());
        match term {
            Some(term) => LeadershipStatus {
                leader: true,
                backend: "etcd".to_owned(),
                epoch: Some(term.epoch),
                leader_address: Some(self.inner.advertise.clone()),
            },
            None => LeadershipStatus {
                leader: false,
                backend: "etcd".to_owned(),
                epoch: view.leader_epoch,
                // Our own address while the term lapsed but the task has not noticed yet says
                // nothing useful to a client: nobody is known to lead.
                leader_address: view
                    .leader_address
                    .clone()
                    .filter(|a| view.term.is_none() || a != &self.inner.advertise),
            },
        }
    }

    fn fenced(&self) {
        self.view().term = None;
        self.inner.fenced.notify_one();
    }

    fn handover(&self) -> Option<&dyn Handover> {
        Some(self)
    }
}

impl Handover for EtcdLeadership {
    fn load(&self) -> BoxFuture<'_, Result<Option<Vec<u8>>, String>> {
        Box::pin(async move {
            let Some(mut client) = self.view().client.clone() else { return Err("not connected to etcd".to_owned()) };
            let timeout = self.inner.config.request_timeout();
            let mut resp =
                within(timeout, "get", client.get(self.handover_key(), None)).await.map_err(|e| e.to_string())?;
            Ok(resp.take_kvs().into_iter().next().map(|kv| kv.value().to_vec()))
        })
    }

    fn save(&self, epoch: u64, state: Vec<u8>) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async move {
            let (client, key) = {
                let view = self.view();
                let key = view.term.as_ref().filter(|t| t.epoch == epoch).map(|t| t.key.clone());
                (view.client.clone(), key)
            };
            let (Some(mut client), Some(key)) = (client, key) else {
                return Err(format!("this master no longer holds term {epoch}"));
            };
            let txn = Txn::new()
                .when([Compare::create_revision(key, CompareOp::Equal, epoch as i64)])
                .and_then([TxnOp::put(self.handover_key(), state, None)]);
            let timeout = self.inner.config.request_timeout();
            let resp = within(timeout, "txn", client.txn(txn)).await.map_err(|e| e.to_string())?;
            if resp.succeeded() { Ok(()) } else { Err(format!("term {epoch} is over in etcd")) }
        })
    }
}
