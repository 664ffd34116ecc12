//! The storage admin protocol over HTTP.

use lb_common::config::shared::HttpClientConfig;
use lb_common::http::{ClientError, HttpClient};
use lb_common::ids::OperationId;
use lb_common::protocol::{AdminRequest, Operation, OperationAccepted, Topology};

use super::{StorageAdapter, StorageError, StorageFuture};

#[derive(Debug, Clone)]
pub struct HttpStorage {
    client: HttpClient,
}

impl HttpStorage {
    pub fn new(base_url: &str, config: &HttpClientConfig) -> Self {
        Self { client: HttpClient::new(base_url, config) }
    }

    pub fn base_url(&self) -> &str {
        self.client.base_url()
    }
}

fn classify(err: ClientError) -> StorageError {
    match &err {
        ClientError::Connect { .. } => StorageError::Unreachable(err.to_string()),
        ClientError::Status { status, body, .. } if status.is_client_error() => {
            StorageError::Rejected { status: status.as_u16(), message: format!("{} ({})", body.error, body.code) }
        }
        _ => StorageError::Uncertain(err.to_string()),
    }
}

impl StorageAdapter for HttpStorage {
    fn topology(&self) -> StorageFuture<'_, Topology> {
        Box::pin(async move { self.client.get("/v1/topology").await.map_err(classify) })
    }

    fn submit<'a>(&'a self, request: &'a AdminRequest) -> StorageFuture<'a, OperationId> {
        Box::pin(async move {
            let path = format!("/v1/admin/{}", request.spec.kind().as_str());
            let accepted: OperationAccepted = self.client.post(&path, request).await.map_err(classify)?;
            Ok(accepted.operation_id)
        })
    }

    fn operation<'a>(&'a self, id: &'a OperationId) -> StorageFuture<'a, Operation> {
        Box::pin(async move { self.client.get(&format!("/v1/admin/operations/{id}")).await.map_err(classify) })
    }
}
