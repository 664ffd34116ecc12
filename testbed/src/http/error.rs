//! Admin errors as HTTP errors with the shared body.

use axum::http::StatusCode;
use lb_common::http::ApiError;

use crate::model::mutate::LayoutError;
use crate::ops::AdminError;

pub fn to_api(err: AdminError) -> ApiError {
    let message = err.to_string();
    match err {
        AdminError::Layout(LayoutError::UnknownPartition(_)) => {
            ApiError::new(StatusCode::NOT_FOUND, "unknown_partition", message)
        }
        AdminError::Layout(_) => ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_action", message),
        AdminError::Busy { .. } => ApiError::new(StatusCode::CONFLICT, "partition_busy", message),
        AdminError::ActionReused(_) => ApiError::new(StatusCode::CONFLICT, "action_reused", message),
    }
}
