//! What the master keeps in its ResultDataStore, one typed body per record kind, as
//! `GET /api/v1/records/{kind}` serves them.
//!
//! | kind | key | body |
//! |---|---|---|
//! | `analysis` | the pass's time, epoch ms | [`AnalysisRecord`] |
//! | `proposal` | the action id it has or gets | [`Proposal`] |
//! | `action` | action id | [`ActionEntry`] |
//! | `evaluation` | action id | [`Evaluation`] |
//! | `config_reload` | the attempt's time, epoch ms | [`ReloadStatus`] |

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::actions::{ActionRecord, ActionRequest, ActionSpec};
use super::proposals::{Declined, PlanStats, Policy, PolicyMode, Proposal};
use crate::config::watch::ReloadStatus;
use crate::ids::{KeyRange, PartitionId, TableId, TenantId, WorkerId};

/// The kinds of record, a closed set so a typo cannot create a new one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum RecordKind {
    /// A pass of an analyzer: what it saw and concluded.
    Analysis,
    /// A proposed action with its reasons, numbers and rejected alternatives.
    Proposal,
    /// An action as submitted to the ops server and as it progressed.
    Action,
    /// An action's before/after evaluation and verdict.
    Evaluation,
    /// A config reload attempt and its outcome.
    ConfigReload,
}

impl RecordKind {
    pub const ALL: [RecordKind; 5] = [
        RecordKind::Analysis,
        RecordKind::Proposal,
        RecordKind::Action,
        RecordKind::Evaluation,
        RecordKind::ConfigReload,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            RecordKind::Analysis => "analysis",
            RecordKind::Proposal => "proposal",
            RecordKind::Action => "action",
            RecordKind::Evaluation => "evaluation",
            RecordKind::ConfigReload => "config_reload",
        }
    }

    pub fn parse(s: &str) -> Option<RecordKind> {
        RecordKind::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

/// The body type of one record kind: what `GET /api/v1/records/{kind}` decodes into.
pub trait RecordBody: Serialize + DeserializeOwned + Send + 'static {
    const KIND: RecordKind;
}

impl RecordBody for AnalysisRecord {
    const KIND: RecordKind = RecordKind::Analysis;
}
impl RecordBody for Proposal {
    const KIND: RecordKind = RecordKind::Proposal;
}
impl RecordBody for ActionEntry {
    const KIND: RecordKind = RecordKind::Action;
}
impl RecordBody for Evaluation {
    const KIND: RecordKind = RecordKind::Evaluation;
}
impl RecordBody for ReloadStatus {
    const KIND: RecordKind = RecordKind::ConfigReload;
}

/// A stored record, as read back.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct StoredRecord<T> {
    pub kind: RecordKind,
    pub key: String,
    pub at_ms: i64,
    pub body: T,
}

/// `GET /api/v1/records/{kind}`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams), into_params(parameter_in = Query))]
#[serde(deny_unknown_fields)]
pub struct RecordsQuery {
    /// Only records at or after this time (default: all kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since_ms: Option<i64>,
    /// Default 100, at most 1,000.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<usize>,
}

/// `GET /api/v1/records/{kind}` reply: newest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(bound(deserialize = "T: DeserializeOwned"))]
pub struct RecordsResponse<T> {
    pub records: Vec<StoredRecord<T>>,
}

/// What an online pass decided (kind `analysis`, key = the pass's time). Written when a pass
/// submitted something, when what it proposes in dry run or declines changed, and at least
/// once a minute while that stays; a quiet cluster writes none.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AnalysisRecord {
    /// Where the pass's load windows ended.
    pub window_end_ms: i64,
    pub stats: PlanStats,
    /// What the pass proposed: `[policy, mode, spec]` each.
    pub proposed: Vec<(Policy, PolicyMode, ActionSpec)>,
    /// The first declined items with why.
    pub declined: Vec<Declined>,
    pub declined_total: usize,
}

/// An action as the master submitted and followed it (kind `action`, key = action id). One
/// record per action, rewritten as it progresses: submitted, then applied or not (or refused
/// or unanswered at submission).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ActionEntry {
    pub request: ActionRequest,
    pub outcome: ActionOutcome,
    /// The ops server's record as last seen; absent when the submission got no record back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub record: Option<ActionRecord>,
    /// Why the submission failed, or what the master found when the action ended (e.g. a
    /// failure that left the topology changed counts as applied).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// Its stages so far (the evaluation's record has them all, relief included).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stages: Option<Stages>,
}

/// Where an action stands as the master sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum ActionOutcome {
    /// The ops server accepted it; it has not ended yet.
    Submitted,
    /// It ended and its effect is in the topology: it will be evaluated.
    Applied,
    /// It ended without effect (failed before touching storage, cancelled, or not found in
    /// the topology afterwards).
    NotApplied,
    /// The ops server refused it (4xx), or it certainly never arrived.
    Refused,
    /// The reply to the submission was lost: the ops server may have it, and the master keeps
    /// following it until it knows.
    Unanswered,
}

impl ActionOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            ActionOutcome::Submitted => "submitted",
            ActionOutcome::Applied => "applied",
            ActionOutcome::NotApplied => "not_applied",
            ActionOutcome::Refused => "refused",
            ActionOutcome::Unanswered => "unanswered",
        }
    }
}

/// What an evaluation watches, fixed when the action is submitted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Subject {
    pub partitions: Vec<PartitionId>,
    /// The table and key range the target partitions covered: after a split, its pieces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub range: Option<(TenantId, TableId, KeyRange)>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<WorkerId>,
    /// A move's destination; a cross-worker merge's landing owner (its source then being the
    /// streamed side's owner); for a group, resolved afterwards as the target's new owner.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dest: Option<WorkerId>,
    /// A group that dedicates the partition's own worker to it (its neighbours leave).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dedication: bool,
}

/// The watched numbers over one window. Ratios are of capacity (a partition's: of its limit)
/// and count demand, served plus rejected, so an overloaded worker does not look capped at 1.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Snapshot {
    /// Hottest of the subject's partitions (after a split: of its pieces), demand over limit.
    pub target_ratio: f64,
    /// Rejected share of the subject's demand.
    pub target_rejected_ratio: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_ratio: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dest_ratio: Option<f64>,
    /// Over healthy workers outside dedicated groups (the pool the planner balances).
    pub cluster_max_ratio: f64,
    pub cluster_mean_ratio: f64,
    pub cluster_cv: f64,
    /// The subject's demand (served plus rejected ops/s over every partition now covering it):
    /// a move's or split's load must still be there after it, or nothing was relieved.
    #[serde(default)]
    pub target_demand_ops_per_sec: f64,
    /// The whole cluster's demand (served plus rejected ops/s).
    #[serde(default)]
    pub cluster_demand_ops_per_sec: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Effective,
    NoEffect,
    Harmful,
    /// The load the action was judged on left (its clients stopped, or moved elsewhere): a drop
    /// in demand is not relief, so nothing can be said. Never counted as effective.
    Inconclusive,
}

impl Verdict {
    pub const ALL: [Verdict; 4] = [Verdict::Effective, Verdict::NoEffect, Verdict::Harmful, Verdict::Inconclusive];

    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Effective => "effective",
            Verdict::NoEffect => "no_effect",
            Verdict::Harmful => "harmful",
            Verdict::Inconclusive => "inconclusive",
        }
    }
}

/// The score and verdict of one action, and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Judgement {
    /// Relative improvement of the triggering metric: 1 = gone, 0 = unchanged, < 0 = worse.
    pub score: f64,
    pub verdict: Verdict,
    /// Which metric was judged (`target_ratio`, `source_ratio`, `cluster_max_over_mean`).
    pub metric: String,
    pub why: String,
}

/// One action's evaluation as stored in the ResultDataStore (kind `evaluation`, key = action id).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Evaluation {
    pub action_id: String,
    pub spec: ActionSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<Policy>,
    pub subject: Subject,
    pub submitted_at_ms: i64,
    pub finished_at_ms: i64,
    pub evaluated_at_ms: i64,
    pub settle_secs: u64,
    pub window_secs: u64,
    pub before: Snapshot,
    pub after: Snapshot,
    #[serde(flatten)]
    pub judgement: Judgement,
    /// The move back that a harmful move triggered, when reverts are on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revert: Option<ActionSpec>,
    /// Where the action's time went, from the load's onset to its relief.
    #[serde(default)]
    pub stages: Stages,
}

/// Where an action's time went, as the master saw it: epoch millis of each stage, absent when
/// it did not happen (yet) or does not apply (an action by hand has no onset). In order:
///
/// | stage | when |
/// |---|---|
/// | `onset_ms` | the first pass whose load window showed the trigger (the hot streak's start) |
/// | `detected_ms` | the pass in which the hysteresis was met |
/// | `proposed_ms` | the pass that proposed and submitted it (approved, for a dry run) |
/// | `accepted_ms` | the ops server created its record |
/// | `started_ms`, `finished_ms` | the ops server's execution |
/// | `visible_ms` | the first pass whose view of the layout shows its effect |
/// | `measured_ms` | the first pass whose load window began after it finished |
/// | `relieved_ms` | the first pass after it finished in which its target is relieved: under 1 % of its demand rejected, its hottest partition within its limit and the worker it relieved under capacity |
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Stages {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub onset_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detected_ms: Option<i64>,
    #[serde(default)]
    pub proposed_ms: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accepted_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub visible_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub relieved_ms: Option<i64>,
}

impl Stages {
    /// The stages in order, by name, with their times.
    pub fn named(&self) -> [(&'static str, Option<i64>); 9] {
        [
            ("onset", self.onset_ms),
            ("detected", self.detected_ms),
            ("proposed", Some(self.proposed_ms)),
            ("accepted", self.accepted_ms),
            ("started", self.started_ms),
            ("finished", self.finished_ms),
            ("visible", self.visible_ms),
            ("measured", self.measured_ms),
            ("relieved", self.relieved_ms),
        ]
    }

    /// Takes what the ops server's record says: accepted, started, finished.
    pub fn follow(&mut self, record: &ActionRecord) {
        self.accepted_ms = Some(record.created_at_ms);
        self.started_ms = record.started_at_ms.or(self.started_ms);
        self.finished_ms = record.finished_at_ms.or(self.finished_ms);
    }

    /// Each stage's duration from the one before it that happened, in seconds, e.g.
    /// `onset→detected 2.0 s, detected→proposed 0.0 s, …`; stages that did not happen are left
    /// out.
    pub fn describe(&self) -> String {
        let mut out = Vec::new();
        let mut last: Option<(&str, i64)> = None;
        for (name, at) in self.named() {
            let Some(at) = at else { continue };
            if let Some((prev, t)) = last {
                out.push(format!("{prev}→{name} {:.1} s", (at - t) as f64 / 1000.0));
            }
            last = Some((name, at));
        }
        out.join(", ")
    }
}
