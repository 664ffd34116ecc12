//! How the ops server reaches the storage system: a trait, so that other systems can be
//! adapted, its implementation for the storage admin protocol over HTTP (what the testbed
//! serves), and one for a Valkey / Redis cluster talked to directly ([`valkey`]).
//!
//! Every error says whether the storage system may have applied the request: the executor never
//! retries, and never plans around, a "maybe" without re-reading the topology first.

mod http;
pub mod valkey;

use std::future::Future;
use std::pin::Pin;

use lb_common::ids::OperationId;
use lb_common::protocol::{ActionRecord, AdminRequest, Execution, Operation, Topology};

pub use http::HttpStorage;
pub use valkey::ValkeyStorage;

use crate::config::{StorageConfig, StorageKind};
use lb_common::config::shared::HttpClientConfig;

/// The adapter `[storage]` asks for.
pub fn from_config(
    storage: &StorageConfig,
    client: &HttpClientConfig,
) -> Result<std::sync::Arc<dyn StorageAdapter>, StorageError> {
    Ok(match (storage.kind, &storage.valkey) {
        (StorageKind::Valkey, Some(valkey)) => std::sync::Arc::new(ValkeyStorage::new(valkey.clone())?),
        (StorageKind::Valkey, None) => {
            return Err(StorageError::Unreachable("storage.kind = \"valkey\" needs [storage.valkey]".to_owned()));
        }
        (StorageKind::Http, _) => std::sync::Arc::new(HttpStorage::new(&storage.url, client)),
    })
}

/// A boxed future, so the trait stays object-safe (`Arc<dyn StorageAdapter>`).
pub type StorageFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, StorageError>> + Send + 'a>>;

pub trait StorageAdapter: Send + Sync + std::fmt::Debug {
    fn topology(&self) -> StorageFuture<'_, Topology>;
    /// Starts the operation for an action. Idempotent by `request.action_id`.
    fn submit<'a>(&'a self, request: &'a AdminRequest) -> StorageFuture<'a, OperationId>;
    fn operation<'a>(&'a self, id: &'a OperationId) -> StorageFuture<'a, Operation>;

    /// Polls the operation `id` that `request` started. An adapter that keeps its operations in
    /// memory (Valkey) takes over one it does not know — the ops server restarted, or a config
    /// change rebuilt the adapter — from the storage system's own state instead of answering
    /// "unknown". By default the storage system keeps its operations: plain [`Self::operation`].
    fn poll<'a>(&'a self, id: &'a OperationId, request: &'a AdminRequest) -> StorageFuture<'a, Operation> {
        let _ = request;
        self.operation(id)
    }

    /// Called once on a newly built adapter with the actions that succeeded before (oldest
    /// first), for what the adapter itself remembers of them and the storage system does not
    /// (the Valkey adapter: which node is dedicated to which slot). Nothing by default.
    fn remember(&self, succeeded: &[ActionRecord]) {
        let _ = succeeded;
    }
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
    /// Bounded label for `lb_ops_storage_errors_total{error}`.
    pub fn label(&self) -> &'static str {
        match self {
            StorageError::Rejected { .. } => "rejected",
            StorageError::Unreachable(_) => "unreachable",
            StorageError::Uncertain(_) => "uncertain",
        }
    }

    pub fn execution(&self) -> Execution {
        match self {
            StorageError::Rejected { .. } | StorageError::Unreachable(_) => Execution::NotExecuted,
            StorageError::Uncertain(_) => Execution::MaybeExecuted,
        }
    }
}

/// Any adapter, with its failed calls counted in `lb_ops_storage_errors_total{call,error}`.
#[derive(Debug)]
pub struct Counted(pub std::sync::Arc<dyn StorageAdapter>);

impl Counted {
    fn count<'a, T: Send + 'a>(call: &'static str, inner: StorageFuture<'a, T>) -> StorageFuture<'a, T> {
        Box::pin(async move {
            let result = inner.await;
            if let Err(error) = &result {
                metrics::counter!("lb_ops_storage_errors_total", "call" => call, "error" => error.label()).increment(1);
            }
            result
        })
    }
}

impl StorageAdapter for Counted {
    fn topology(&self) -> StorageFuture<'_, Topology> {
        Self::count("topology", self.0.topology())
    }

    fn submit<'a>(&'a self, request: &'a AdminRequest) -> StorageFuture<'a, OperationId> {
        Self::count("submit", self.0.submit(request))
    }

    fn operation<'a>(&'a self, id: &'a OperationId) -> StorageFuture<'a, Operation> {
        Self::count("operation", self.0.operation(id))
    }

    fn poll<'a>(&'a self, id: &'a OperationId, request: &'a AdminRequest) -> StorageFuture<'a, Operation> {
        Self::count("operation", self.0.poll(id, request))
    }

    fn remember(&self, succeeded: &[ActionRecord]) {
        self.0.remember(succeeded);
    }
}

/// An adapter that could not be built from the config: every call fails with the reason, as
/// certainly not executed.
#[derive(Debug)]
pub struct Broken(pub String);

impl StorageAdapter for Broken {
    fn topology(&self) -> StorageFuture<'_, Topology> {
        Box::pin(async move { Err(StorageError::Unreachable(self.0.clone())) })
    }

    fn submit<'a>(&'a self, _request: &'a AdminRequest) -> StorageFuture<'a, OperationId> {
        Box::pin(async move { Err(StorageError::Unreachable(self.0.clone())) })
    }

    fn operation<'a>(&'a self, _id: &'a OperationId) -> StorageFuture<'a, Operation> {
        Box::pin(async move { Err(StorageError::Unreachable(self.0.clone())) })
    }
}
