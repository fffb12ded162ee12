//! zenoh for `rtloop run --zenoh`: state and events published under `rtloop/<robot>/...`,
//! the operator's commands taken from `rtloop/<robot>/cmd`.
//!
//! (Being written.)
//!
//! Must never: accept per-cycle servo commands from the network; block the telemetry thread.

use super::{Publisher, RemoteControl};
use crate::config::LiveConfig;
use std::sync::Arc;

/// Open a zenoh session as `config.zenoh` says and publish as `robot`.
pub fn publisher(config: &LiveConfig, robot: &str, remote: Arc<RemoteControl>) -> Result<Publisher, String> {
    let _ = (config, robot, remote);
    Err("--zenoh: zenoh publishing is not built yet".into())
}
