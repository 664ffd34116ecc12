//! Fencing of master leadership terms (issue 23).
//!
//! Elected masters stamp their term (`leader_epoch`, the etcd election key's revision, which
//! grows with every election) on each action and announce it when they take over
//! (`POST /v1/fencing`). The ops server keeps the newest term it has seen, in the audit log so a
//! restart keeps it, and refuses a submission or announcement with an older one: 409
//! `stale_epoch`, recorded in the audit log and counted in `lb_ops_stale_epoch_refusals_total`.
//! A leader that was paused (GC, VM stall, SIGSTOP) past its lease therefore cannot act once a
//! newer one has spoken. Submissions without a term (a single master, lbctl, the console) are
//! never fenced.

use std::sync::Mutex;

use lb_common::ids::ActionId;
use lb_common::protocol::{FencingStatus, MAX_FENCING_REFUSALS_LISTED, StaleEpochRefusal};
use tracing::{info, warn};

use super::audit::{Audit, AuditError};

#[derive(Debug, thiserror::Error)]
pub enum FencingError {
    #[error("leader epoch {epoch} is older than {newest}, the newest this ops server has seen: a newer master leads")]
    Stale { epoch: u64, newest: u64 },
    #[error(transparent)]
    Audit(#[from] AuditError),
}

#[derive(Debug)]
pub struct Fencing {
    newest: Mutex<Option<(u64, String)>>,
    audit: Audit,
}

impl Fencing {
    /// Starts from the newest term the audit log recorded.
    pub fn open(audit: Audit) -> Result<Self, AuditError> {
        let newest = audit.newest_epoch()?;
        Ok(Self { newest: Mutex::new(newest), audit })
    }

    /// Admits `epoch` from `caller` (for `action`, or an announcement): newer terms become the
    /// newest, the newest itself passes, an older one is refused and audited.
    pub async fn admit(
        &self,
        epoch: u64,
        caller: &str,
        action: Option<&ActionId>,
        now_ms: i64,
    ) -> Result<(), FencingError> {
        let newest = {
            let mut newest = self.newest.lock().expect("fencing lock is never poisoned");
            match newest.as_ref() {
                Some((n, _)) if *n == epoch => return Ok(()),
                Some((n, _)) if *n > epoch => Some(*n),
                _ => {
                    *newest = Some((epoch, caller.to_owned()));
                    None
                }
            }
        };
        match newest {
            None => {
                info!(epoch, by = caller, "new leader epoch");
                self.audit.record_epoch(epoch, caller, now_ms).await?;
                Ok(())
            }
            Some(newest) => {
                warn!(
                    epoch,
                    newest,
                    by = caller,
                    action = action.map(|a| a.as_str()).unwrap_or(""),
                    "stale leader epoch refused"
                );
                metrics::counter!("lb_ops_stale_epoch_refusals_total").increment(1);
                let refusal = StaleEpochRefusal {
                    at_ms: now_ms,
                    action_id: action.cloned(),
                    leader_epoch: epoch,
                    newest_epoch: newest,
                    submitted_by: caller.to_owned(),
                };
                self.audit.record_refusal(&refusal).await?;
                Err(FencingError::Stale { epoch, newest })
            }
        }
    }

    pub async fn status(&self) -> Result<FencingStatus, AuditError> {
        let newest = self.newest.lock().expect("fencing lock is never poisoned").clone();
        let refused = self.audit.refusals(MAX_FENCING_REFUSALS_LISTED).await?;
        Ok(FencingStatus {
            newest_epoch: newest.as_ref().map(|(e, _)| *e),
            newest_leader: newest.map(|(_, who)| who),
            refused,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_older_epoch_is_refused_and_audited_and_the_newest_survives_a_restart() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("audit.sqlite");
        let fencing = Fencing::open(Audit::open(&path).expect("open")).expect("fencing");
        fencing.admit(7, "master-a", None, 1).await.expect("first term");
        fencing.admit(7, "master-a", Some(&"a-1".parse().expect("id")), 2).await.expect("same term");
        fencing.admit(9, "master-b", None, 3).await.expect("newer term");
        let err = fencing.admit(7, "master-a", Some(&"a-2".parse().expect("id")), 4).await.expect_err("stale");
        assert!(matches!(err, FencingError::Stale { epoch: 7, newest: 9 }), "{err}");
        drop(fencing);
        let fencing = Fencing::open(Audit::open(&path).expect("reopen")).expect("fencing");
        let status = fencing.status().await.expect("status");
        assert_eq!(status.newest_epoch, Some(9));
        assert_eq!(status.newest_leader.as_deref(), Some("master-b"));
        assert_eq!(status.refused.len(), 1);
        assert_eq!(status.refused[0].action_id.as_ref().map(|a| a.as_str()), Some("a-2"));
        assert_eq!((status.refused[0].leader_epoch, status.refused[0].newest_epoch), (7, 9));
        assert!(fencing.admit(8, "master-a", None, 5).await.is_err(), "still fenced after a restart");
    }
}
