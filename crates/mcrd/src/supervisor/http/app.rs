//! What every handler of the HTTP server shares ([`App`]): the way to the
//! supervisor, and who may do what.

use std::sync::Arc;

use hyper::StatusCode;
use mcr_core::control::{Reply, Request};
use tokio::sync::{mpsc, oneshot};

use super::access::Access;
use super::problem::Problem;
use crate::supervisor::control::Call;

/// What every handler shares.
#[derive(Clone)]
pub(super) struct App {
    pub(super) calls: mpsc::Sender<Call>,
    pub(super) access: Arc<Access>,
}

impl std::fmt::Debug for App {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("App").finish_non_exhaustive()
    }
}

impl App {
    /// Asks the supervisor; a refusal becomes a problem.
    pub(super) async fn ask(&self, req: Request) -> Result<Reply, Problem> {
        let (tx, rx) = oneshot::channel();
        let gone = || {
            Problem::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "shutting_down",
                "mcrd is shutting down",
            )
        };
        self.calls.send((req, tx)).await.map_err(|_| gone())?;
        match rx.await.map_err(|_| gone())?.reply {
            Reply::Error { error } => Err(error.into()),
            r => Ok(r),
        }
    }
}
