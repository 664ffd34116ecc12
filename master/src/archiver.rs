//! The archiver: every `offline.interval_secs` the leader fetches the agents' hourly rollups
//! through the ops server (`POST /v1/collect/rollups`, fanned out like collection), appends them
//! to the archive ([`lb_offline::Archive`], exactly once per (worker, partition, hour)), drops the
//! days past `offline.retention_days`, and runs one offline pass on a blocking thread; the
//! findings go to the online loop's offline analyzer through [`FindingsSlot`].
//!
//! **Which hours.** Each round asks every agent for the hours from the newest one archived (over
//! all workers; at the first round of a fresh archive, the whole look-back) up to the last
//! complete hour, and always the two hours before that again: an agent folds a late report into
//! an hour it already served, and the archive's merge keeps the more complete copy. A worker
//! that answers while its own newest archived hour is older than that (its agent was down or
//! unreachable longer, or it is new) is then asked alone for what it missed, back to the
//! look-back; when that fails, its recent rows are archived anyway and the hole is logged and
//! counted (`lb_master_archive_catch_up_failures_total`). A restart loses nothing: the archive
//! on disk says where to resume.
//!
//! **On demand.** `POST /api/v1/offline/pass` wakes the loop for a round now; the next one
//! still comes an interval after it.
//!
//! **Never in the online loop's way.** The fetch is async, the file work runs under
//! `spawn_blocking`, the pass on a thread of its own at the lowest OS priority
//! ([`lb_offline::at_low_priority`]), and the online loop only reads the slot. polars' threads are capped by
//! `POLARS_MAX_THREADS` in the master's environment (the shipped unit sets 1).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use lb_common::clients::OpsClient;
use lb_common::ids::WorkerId;
use lb_common::protocol::{CollectStatus, HourlyRollup, RollupsCollectRequest};
use lb_offline::{Archive, DAY_MS, HOUR_MS};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::Shared;
use crate::offline::{FindingsSlot, pass};

/// Hours re-read behind the newest archived one, for late reports.
const LATE_HOURS: i64 = 2;
/// How long a round waits for the online loop to publish its layout.
const LAYOUT_WAIT: Duration = Duration::from_secs(30);

/// The archiver loop; see the module doc.
pub async fn run(shared: Shared, ops: impl Fn() -> OpsClient + Send, slot: FindingsSlot, cancel: CancellationToken) {
    // The first round soon after start (the archive may be behind by the downtime).
    let mut delay = Duration::from_secs(10);
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(delay) => {}
            _ = slot.pass_requested() => info!("offline pass asked for"),
        }
        let cfg = shared.config.borrow().clone();
        delay = Duration::from_secs(cfg.offline.interval_secs);
        if !shared.leadership.status().leader {
            continue;
        }
        let section = cfg.offline.clone();
        let archive = Archive::new(section.archive_dir(&cfg.store.path));
        let started = Instant::now();
        let now_ms = chrono::Utc::now().timestamp_millis();
        let silent = match archive_round(&archive, &ops(), &section, now_ms).await {
            Ok(silent) => silent,
            Err(error) => {
                warn!(%error, "offline round: no rollups archived; the pass runs on what the archive has");
                metrics::counter!("lb_master_offline_passes_total", "outcome" => "no_rollups").increment(1);
                vec!["the ops server".to_owned()]
            }
        };
        slot.request_layout();
        let waited = Instant::now();
        let layout = loop {
            if let Some((_, layout)) = slot.layout() {
                break Some(layout);
            }
            if waited.elapsed() > LAYOUT_WAIT || cancel.is_cancelled() {
                break None;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        };
        let Some(layout) = layout else {
            warn!("offline round: the online loop published no layout (standby, stale collection?); no pass");
            metrics::counter!("lb_master_offline_passes_total", "outcome" => "no_layout").increment(1);
            continue;
        };
        // On a thread of its own at the lowest OS priority: the online loop keeps its core.
        let result = tokio::task::spawn_blocking(move || {
            lb_offline::at_low_priority(move || pass(&archive, &layout, &section, now_ms, &silent))
        })
        .await
        .map(|joined| joined.unwrap_or_else(|error| Err(error.to_string())));
        let elapsed = started.elapsed().as_secs_f64();
        metrics::gauge!("lb_master_offline_pass_seconds").set(elapsed);
        match result {
            Ok(Ok(found)) => {
                let partial = !found.coverage.partial.is_empty();
                let outcome = if partial { "partial" } else { "ok" };
                metrics::counter!("lb_master_offline_passes_total", "outcome" => outcome).increment(1);
                metrics::counter!("lb_master_archive_files_skipped_total")
                    .increment(found.coverage.files_skipped.len() as u64);
                metrics::gauge!("lb_master_offline_proposals", "kind" => "merge").set(found.merges.len() as f64);
                metrics::gauge!("lb_master_offline_proposals", "kind" => "peak").set(found.peaks.len() as f64);
                for skipped in &found.coverage.files_skipped {
                    warn!(file = %skipped, "archive file skipped");
                }
                info!(
                    seconds = elapsed,
                    merges = found.merges.len(),
                    peaks = found.peaks.len(),
                    hours = found.coverage.hours_with_data,
                    partial = %found.coverage.partial.join("; "),
                    "offline pass"
                );
                slot.publish(found);
            }
            Ok(Err(error)) => {
                warn!(%error, "offline pass failed");
                metrics::counter!("lb_master_offline_passes_total", "outcome" => "error").increment(1);
            }
            Err(error) => {
                warn!(%error, "offline pass task failed");
                metrics::counter!("lb_master_offline_passes_total", "outcome" => "error").increment(1);
            }
        }
    }
}

/// Fetches and archives the hours due (see the module doc); returns the agents that answered
/// with nothing (the pass is then partial).
pub async fn archive_round(
    archive: &Archive,
    ops: &OpsClient,
    section: &crate::offline::OfflineSection,
    now_ms: i64,
) -> Result<Vec<String>, String> {
    let to_ms = now_ms.div_euclid(HOUR_MS) * HOUR_MS;
    let oldest = to_ms - i64::from(section.lookback_hours) * HOUR_MS;
    let last_hours = {
        let archive = archive.clone();
        tokio::task::spawn_blocking(move || last_archived_hours(&archive, now_ms)).await.map_err(|e| e.to_string())?
    };
    let newest = last_hours.values().copied().max();
    let from_ms = newest.map_or(oldest, |h| (h - LATE_HOURS * HOUR_MS).max(oldest));
    let request = RollupsCollectRequest { from_ms, to_ms, agent_deadline_ms: None, workers: vec![] };
    let reply = ops.collect_rollups(&request).await.map_err(|e| e.to_string())?;
    let mut silent = Vec::new();
    let mut by_worker: BTreeMap<String, Vec<HourlyRollup>> = BTreeMap::new();
    for agent in reply.agents {
        if agent.status != CollectStatus::Ok || agent.rollups.is_empty() {
            if agent.status != CollectStatus::Down {
                silent.push(agent.worker_id.to_string());
            }
            continue;
        }
        by_worker.entry(agent.worker_id.to_string()).or_default().extend(agent.rollups);
    }
    // A worker back from an outage longer than the late hours (or new) is asked alone for the
    // hours it missed. If that fails (an ops server too old for `workers`, a deadline), its
    // recent rows are archived all the same and the hole is named: holding them back would
    // stall its archive on every round the catch-up keeps failing.
    if let Some(catch_up) = lagging(by_worker.keys(), &last_hours, from_ms, oldest) {
        let workers: Vec<WorkerId> = catch_up.workers.iter().filter_map(|w| w.parse().ok()).collect();
        let request =
            RollupsCollectRequest { from_ms: catch_up.from_ms, to_ms: from_ms, agent_deadline_ms: None, workers };
        let answered = match ops.collect_rollups(&request).await {
            Ok(reply) => reply.agents.into_iter().filter(|a| a.status == CollectStatus::Ok).collect(),
            Err(error) => {
                warn!(%error, "catch-up of lagging workers' rollups failed");
                Vec::new()
            }
        };
        let mut caught_up = std::collections::BTreeSet::new();
        for agent in answered {
            let worker = agent.worker_id.to_string();
            info!(%worker, from_ms = catch_up.from_ms, to_ms = from_ms, rows = agent.rollups.len(), "archive caught up on a lagging worker");
            by_worker.entry(worker.clone()).or_default().extend(agent.rollups);
            caught_up.insert(worker);
        }
        for worker in catch_up.workers.iter().filter(|w| !caught_up.contains(*w)) {
            warn!(%worker, from_ms = catch_up.from_ms, to_ms = from_ms, "lagging worker not caught up: these hours may be missing from its archive");
            metrics::counter!("lb_master_archive_catch_up_failures_total").increment(1);
        }
    }
    let archive = archive.clone();
    let retention = section.retention_days;
    tokio::task::spawn_blocking(move || {
        for (worker, rows) in by_worker {
            match archive.append(&worker, &rows) {
                Ok(done) => {
                    metrics::counter!("lb_master_archive_rows_total", "kind" => "new").increment(done.new_rows as u64);
                    metrics::counter!("lb_master_archive_rows_total", "kind" => "replaced")
                        .increment(done.replaced_rows as u64);
                    metrics::counter!("lb_master_archive_files_skipped_total").increment(done.corrupt_moved as u64);
                }
                Err(error) => warn!(%error, %worker, "rollups not archived"),
            }
        }
        match archive.prune(retention, now_ms) {
            Ok(0) => {}
            Ok(n) => info!(days = n, "archive days past the retention removed"),
            Err(error) => warn!(%error, "archive retention"),
        }
    })
    .await
    .map_err(|e| e.to_string())?;
    Ok(silent)
}

/// Each worker's newest archived hour, from the last two days' files.
fn last_archived_hours(archive: &Archive, now_ms: i64) -> BTreeMap<String, i64> {
    [now_ms, now_ms - DAY_MS]
        .into_iter()
        .flat_map(|ms| std::fs::read_dir(archive.day_dir(ms)).into_iter().flatten())
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.strip_suffix(".parquet")).map(str::to_owned))
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .filter_map(|worker| archive.last_hour(&worker, now_ms).map(|h| (worker, h)))
        .collect()
}

/// Workers to ask again, alone, for older hours, and from when.
#[derive(Debug, PartialEq, Eq)]
struct CatchUp {
    from_ms: i64,
    workers: Vec<String>,
}

/// The workers of `answered` whose own newest archived hour leaves a whole hour uncovered
/// before `from_ms` (none in the last two days' files: from `oldest`), with the earliest hour
/// any of them needs, late hours included; `None` when every worker is level.
fn lagging<'a>(
    answered: impl Iterator<Item = &'a String>,
    last_hours: &BTreeMap<String, i64>,
    from_ms: i64,
    oldest: i64,
) -> Option<CatchUp> {
    let mut out: Option<CatchUp> = None;
    for worker in answered {
        let need = match last_hours.get(worker) {
            Some(&h) if h + HOUR_MS >= from_ms => continue,
            Some(&h) => (h - LATE_HOURS * HOUR_MS).max(oldest),
            None => oldest,
        };
        if need >= from_ms {
            continue;
        }
        let c = out.get_or_insert(CatchUp { from_ms: need, workers: vec![] });
        c.from_ms = c.from_ms.min(need);
        c.workers.push(worker.clone());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_worker_behind_by_more_than_the_late_hours_or_new_is_caught_up_alone() {
        let t0 = 1_000 * HOUR_MS;
        let oldest = t0 - 168 * HOUR_MS;
        let newest = t0 - HOUR_MS;
        let from = newest - LATE_HOURS * HOUR_MS;
        let last: BTreeMap<String, i64> = [
            ("level".to_owned(), newest),
            ("late-window".to_owned(), from - HOUR_MS),
            ("down-5h".to_owned(), newest - 5 * HOUR_MS),
            ("down-a-week".to_owned(), oldest - 24 * HOUR_MS),
        ]
        .into();
        let answered: Vec<String> = ["level", "late-window", "down-5h", "new", "down-a-week"].map(str::to_owned).into();
        let c = lagging(answered.iter(), &last, from, oldest).expect("some lag");
        // `late-window` archived the hour just before the window: nothing is missing.
        assert_eq!(c.workers, ["down-5h", "new", "down-a-week"]);
        // The new worker needs the whole look-back; the week-old one no more than that.
        assert_eq!(c.from_ms, oldest);
        let only: Vec<String> = vec!["down-5h".to_owned()];
        let c = lagging(only.iter(), &last, from, oldest).expect("lag");
        assert_eq!(c, CatchUp { from_ms: newest - (5 + LATE_HOURS) * HOUR_MS, workers: only.clone() });
        let level: Vec<String> = vec!["level".to_owned(), "late-window".to_owned()];
        assert_eq!(lagging(level.iter(), &last, from, oldest), None);
        // A fresh archive asks everything from the look-back already: nobody lags.
        assert_eq!(lagging(answered.iter(), &BTreeMap::new(), oldest, oldest), None);
    }
}
