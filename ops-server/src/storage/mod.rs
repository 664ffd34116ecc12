//! How the ops server reaches the storage system: a trait, so that other systems can be
//! adapted, and its implementation for the storage admin protocol over HTTP (what the testbed
//! serves).
//!
//! Every error says whether the storage system may have applied the request: the executor never
//! retries, and never plans around, a "maybe" without re-reading the topology first.

mod http;

use std::future::Future;
use std::pin::Pin;

use lb_common::ids::OperationId;
use lb_common::protocol::{AdminRequest, Execution, Operation, Topology};

pub use http::HttpStorage;

/// A boxed future, so the trait stays object-safe (`Arc<dyn StorageAdapter>`).
pub type StorageFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, StorageError>> + Send + 'a>>;

pub trait StorageAdapter: Send + Sync + std::fmt::Debug {
    fn topology(&self) -> StorageFuture<'_, Topology>;
    /// Starts the operation for an action. Idempotent by `request.action_id`.
    fn submit<'a>(&'a self, request: &'a AdminRequest) -> StorageFuture<'a, OperationId>;
    fn operation<'a>(&'a self, id: &'a OperationId) -> StorageFuture<'a, Operation>;
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum StorageError {
    /// The storage system refused the request (4xx): it certainly did not apply it.
    #[error("storage rejected the request ({status}): {message}")]
    Rejected { status: u16, message: String },
    /// The request never reached the storage system.
    #[error("storage unreachable: {0}")]
    Unreachable(String),
    /// The request may have reached it: timeout, broken connection, 5xx, unreadable reply.
    #[error("storage did not answer cleanly: {0}")]
    Uncertain(String),
}

impl StorageError {
    pub fn execution(&self) -> Execution {
        match self {
            StorageError::Rejected { .. } | StorageError::Unreachable(_) => Execution::NotExecuted,
            StorageError::Uncertain(_) => Execution::MaybeExecuted,
        }
    }
}
