//! The online loop: every second, from what the master observed to what it does.
//!
//! **Shape.** A pure core and a thin shell, so that the live loop and the virtual-time
//! simulator run the same controller:
//! - [`OnlineCore::step`]`(observation, config, now) -> PassOutput` holds every decision of a
//!   pass — settling ended actions, evaluation and its feedback, the correction for moves that
//!   ended inside the window, every analyzer, the analysis record, submissions, dry-run offers,
//!   approvals — in one order (documented on `step`). It does no I/O and reads no clock; its
//!   state between passes (the planner's cooldowns, strikes and hysteresis, the tracked actions,
//!   pending proposals, the placement manager) lives inside it.
//! - [`run`] (the live shell) gathers the observation — the ops server's in-flight actions and
//!   the records of tracked ones, the planner's view from the MetricsTable ([`observe`]), the
//!   approvals waiting — calls `step`, and carries out its [`Command`]s: submit to the ops server
//!   (telling the core when a submission was refused), write records, answer approvals — and
//!   publishes the pass as one immutable [`PassSnapshot`] on a `watch` channel. Only a master
//!   the [`crate::leadership`] seam names leader runs passes; a standby publishes its standing.
//!   An elected leader's first pass of a term is a takeover: it announces its epoch to the ops
//!   server, restores its predecessor's [`Handover`] and adopts the masters' actions in flight;
//!   every submission carries the epoch and is preceded by a fresh leadership check, and the
//!   state is saved for a successor after each pass.
//! - The simulator's `lb` strategy (`lb_launcher::sim::strategy::Lb`) is the other shell: it
//!   observes its engine and submits to it.
//!
//! [`analyzer`] is the seam behind which the online planner and the dataset placement manager
//! (and the offline analyzer next) emit proposals in one vocabulary.
//!
//! **Why this order.** Each step feeds the next: an action that ended must be settled before
//! its partition's load is planned on (else a finished move still looks in flight, or a done
//! one not applied); a harmful verdict must rest its partition before the planner looks at it
//! (else the pass that found the harm can propose on it again); worker loads must be corrected
//! for moves inside the window before any analyzer reads them (else the source of a move looks
//! as hot as before it and a second partition leaves it). Each of these was a bug once, caught
//! only by minute-long end-to-end runs; `tests.rs` reproduces them in virtual time.

pub mod analyzer;
mod core;
pub mod observe;
pub mod run;
pub mod snapshot;
#[cfg(test)]
mod tests;

pub use self::core::{
    ANALYSIS_HEARTBEAT_MS, ActionUpdate, ApprovalRequest, Command, Ended, EvaluationView, Handover,
    MAX_DECLINED_RECORDED, ManualRequest, Observation, OnlineConfig, OnlineCore, PassOutput,
};
pub use run::{ManualError, Request, run};
pub use snapshot::PassSnapshot;
