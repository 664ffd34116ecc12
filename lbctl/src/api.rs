//! The two servers lbctl talks to, through lb-common's typed clients.

use lb_common::clients::{MasterClient, OpsClient};

use crate::config::Settings;

#[derive(Debug, Clone)]
pub struct Api {
    pub master: MasterClient,
    pub ops: OpsClient,
}

impl Api {
    pub fn new(settings: &Settings) -> Api {
        let mut master = MasterClient::new(&settings.master_url, &settings.http);
        let mut ops = OpsClient::new(&settings.ops_url, &settings.http);
        if let Some(token) = &settings.token {
            master = master.with_bearer_token(token);
            ops = ops.with_bearer_token(token);
        }
        Api { master, ops }
    }
}

/// Wall-clock now, epoch ms (renderers take it as an argument).
pub fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}
