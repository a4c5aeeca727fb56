//! The readiness and liveness probes of the running container: one probe
//! loop, two consequences. Readiness sets the container's `ready`; a failed
//! liveness probe restarts the container, with the probe's own
//! terminationGracePeriodSeconds if it sets one.

use std::net::IpAddr;
use std::time::Duration;

use tokio::time::Instant;

use super::super::probe::{self, ProbeState, Verdict};
use super::{Stop, Worker};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ProbeKind {
    Readiness,
    Liveness,
}

impl Worker {
    fn probe_state(&mut self, kind: ProbeKind) -> &mut Option<ProbeState> {
        match kind {
            ProbeKind::Readiness => &mut self.readiness,
            ProbeKind::Liveness => &mut self.liveness,
        }
    }

    /// Runs the `kind` probe once and acts on its verdict. A process that
    /// was frozen or exited while the probe ran is not judged by it.
    pub(super) async fn probe(&mut self, kind: ProbeKind) {
        let Some(spec) = self.probe_state(kind).as_ref().map(|s| s.probe.clone()) else {
            return;
        };
        // Exec probes run the container's own release's etcdctl.
        let bins = self
            .main
            .plan
            .as_ref()
            .and_then(|p| p.release.clone())
            .unwrap_or_else(|| self.node.releases.default().clone());
        let outcome =
            probe::run_once(&spec, &self.main.container, IpAddr::V4(self.ip), &bins).await;
        if self.frozen || self.child.is_none() {
            return;
        }
        let Some(state) = self.probe_state(kind).as_mut() else {
            return;
        };
        let verdict = state.record(outcome, Instant::now());
        let why = state.last_error.clone().unwrap_or_default();
        match (kind, verdict) {
            (ProbeKind::Readiness, Verdict::Passing) => self.ready = true,
            (ProbeKind::Readiness, Verdict::Failing) => self.ready = false,
            (ProbeKind::Liveness, Verdict::Failing) => {
                let grace = spec
                    .termination_grace_period_seconds
                    .map(|s| Duration::from_secs(s.max(0) as u64))
                    .unwrap_or_else(|| self.grace());
                tracing::info!(
                    pod = %format!("{}/{}", self.ns, self.name),
                    "liveness probe failed ({why}); restarting"
                );
                self.stop_process(Stop::Liveness, grace);
            }
            _ => {}
        }
    }
}
