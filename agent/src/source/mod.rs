//! Sources the agent polls itself, for storage systems that do not push reports.
//!
//! A source turns what a storage node exposes into the same [`Report`](lb_common::protocol::Report)
//! a worker would push to `POST /v1/report`, and hands it to the same
//! [`MetricStore::write_report`](crate::store::MetricStore::write_report): persistence, the
//! in-memory window, rollups and `GET /v1/samples` cannot tell the two apart.
//!
//! - [`valkey`]: one Valkey (or Redis) cluster node, one partition per owned hash slot.

pub mod valkey;
