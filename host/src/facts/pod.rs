//! Reads what a policy needs from a member's Pod, as plain data.

use k8s_openapi::api::core::v1::Pod;
use steward_policy_sdk::{PodPhase, Termination, TimestampMs};

/// The Pod-side facts about one member.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodFacts {
    pub phase: PodPhase,
    pub ready: bool,
    pub ready_since: Option<TimestampMs>,
    pub restarts: u32,
    pub last_termination: Option<Termination>,
    pub deleting: bool,
    /// Why the etcd container is not running, when the kubelet says it is
    /// stuck (`ErrImagePull: failed to pull image …`); None while it is
    /// merely being created.
    pub stuck: Option<String>,
}

impl PodFacts {
    pub fn absent() -> Self {
        Self {
            phase: PodPhase::Absent,
            ..Self::default()
        }
    }

    pub fn is_terminal(&self) -> bool {
        matches!(self.phase, PodPhase::Succeeded | PodPhase::Failed)
    }

    /// A terminated Pod counts towards a crash loop when it failed, unless
    /// the kernel killed it for memory: more memory, not a new member,
    /// fixes that.
    pub fn counts_as_failure(&self) -> bool {
        self.phase == PodPhase::Failed
            && self
                .last_termination
                .as_ref()
                .is_none_or(|t| t.reason != "OOMKilled")
    }
}

pub fn ms(t: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time) -> TimestampMs {
    t.0.as_millisecond()
}

pub fn pod_facts(pod: Option<&Pod>) -> PodFacts {
    let Some(pod) = pod else {
        return PodFacts::absent();
    };
    let status = pod.status.as_ref();
    let phase = match status.and_then(|s| s.phase.as_deref()) {
        Some("Pending") | None => PodPhase::Pending,
        Some("Running") => PodPhase::Running,
        Some("Succeeded") => PodPhase::Succeeded,
        Some("Failed") => PodPhase::Failed,
        Some(_) => PodPhase::Unknown,
    };
    let ready_cond = status
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"));
    let container = status
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.name == "etcd").or_else(|| cs.first()));
    let terminated = container.and_then(|c| {
        c.state
            .as_ref()
            .and_then(|s| s.terminated.as_ref())
            .or_else(|| c.last_state.as_ref().and_then(|s| s.terminated.as_ref()))
    });
    PodFacts {
        phase,
        ready: ready_cond.is_some_and(|c| c.status == "True"),
        ready_since: ready_cond
            .and_then(|c| c.last_transition_time.as_ref())
            .map(ms),
        restarts: container.map_or(0, |c| c.restart_count.max(0) as u32),
        last_termination: terminated.map(|t| Termination {
            reason: t.reason.clone().unwrap_or_default(),
            exit_code: t.exit_code,
            finished_at: t.finished_at.as_ref().map(ms),
        }),
        deleting: pod.metadata.deletion_timestamp.is_some(),
        stuck: container
            .and_then(|c| c.state.as_ref()?.waiting.as_ref())
            .filter(|w| {
                // The normal waits on the way to a start.
                !matches!(
                    w.reason.as_deref(),
                    None | Some("ContainerCreating" | "PodInitializing")
                )
            })
            .map(|w| match (&w.reason, &w.message) {
                (Some(r), Some(m)) if !m.is_empty() => format!("{r}: {m}"),
                (Some(r), _) => r.clone(),
                (None, _) => unreachable!("filtered"),
            })
            .or_else(|| init_stuck(pod)),
    }
}

/// An init container (a restored seed's) that cannot start or failed:
/// while it is stuck the etcd container only waits, `PodInitializing`.
fn init_stuck(pod: &Pod) -> Option<String> {
    let statuses = pod.status.as_ref()?.init_container_statuses.as_ref()?;
    statuses.iter().find_map(|c| {
        let state = c.state.as_ref()?;
        if let Some(w) = &state.waiting {
            let r = w.reason.as_deref()?;
            if matches!(r, "ContainerCreating" | "PodInitializing") {
                return None;
            }
            let m = w.message.as_deref().unwrap_or_default();
            return Some(format!("init container {}: {r}: {m}", c.name));
        }
        let t = state.terminated.as_ref().filter(|t| t.exit_code != 0)?;
        Some(format!(
            "init container {} exited {}: {}",
            c.name,
            t.exit_code,
            t.message
                .as_deref()
                .or(t.reason.as_deref())
                .unwrap_or_default()
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_init_container_that_cannot_start_says_why() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "main-0"},
            "status": {
                "phase": "Pending",
                "initContainerStatuses": [
                    {"name": "fetch-snapshot", "image": "etcd-steward:0.1.0", "imageID": "", "ready": false, "restartCount": 0,
                     "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}},
                    {"name": "restore-snapshot", "image": "etcd:v3.6.17", "imageID": "", "ready": false, "restartCount": 0,
                     "state": {"waiting": {"reason": "CreateContainerConfigError", "message": "secrets \"s3\" not found"}}},
                ],
                "containerStatuses": [
                    {"name": "etcd", "image": "etcd:v3.6.17", "imageID": "", "ready": false, "restartCount": 0,
                     "state": {"waiting": {"reason": "PodInitializing"}}},
                ],
            },
        }))
        .unwrap();
        let stuck = pod_facts(Some(&pod)).stuck.unwrap();
        assert!(
            stuck.starts_with("init container restore-snapshot: CreateContainerConfigError"),
            "{stuck}"
        );
    }

    #[test]
    fn a_pod_that_exited_after_sigterm_reads_as_succeeded_and_not_ready() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "etcd-a"},
            "status": {
                "phase": "Succeeded",
                "conditions": [{"type": "Ready", "status": "False",
                                "lastTransitionTime": "2026-01-01T00:00:10Z"}],
                "containerStatuses": [{
                    "name": "etcd", "ready": false, "restartCount": 0, "image": "etcd", "imageID": "",
                    "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}
                }]
            }
        }))
        .unwrap();
        let f = pod_facts(Some(&pod));
        assert_eq!(f.phase, PodPhase::Succeeded);
        assert!(!f.ready);
        assert!(f.is_terminal());
        assert_eq!(f.ready_since, Some(1_767_225_610_000));
        assert_eq!(f.last_termination.unwrap().reason, "Completed");
    }

    #[test]
    fn a_container_the_kubelet_cannot_start_says_why_and_one_being_created_does_not() {
        let waiting = |reason: &str, message: &str| -> Pod {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "etcd-a"},
                "status": {"phase": "Pending", "containerStatuses": [{
                    "name": "etcd", "ready": false, "restartCount": 0, "image": "etcd", "imageID": "",
                    "state": {"waiting": {"reason": reason, "message": message}}
                }]}
            }))
            .unwrap()
        };
        let pull = waiting(
            "ErrImagePull",
            "failed to pull image \"quay.io/coreos/etcd:v3.6.99\"",
        );
        assert_eq!(
            pod_facts(Some(&pull)).stuck.as_deref(),
            Some("ErrImagePull: failed to pull image \"quay.io/coreos/etcd:v3.6.99\"")
        );
        assert_eq!(
            pod_facts(Some(&waiting("ContainerCreating", ""))).stuck,
            None
        );
        assert_eq!(
            pod_facts(Some(&waiting("CrashLoopBackOff", "")))
                .stuck
                .as_deref(),
            Some("CrashLoopBackOff")
        );
    }

    #[test]
    fn no_pod_is_absent() {
        assert_eq!(pod_facts(None).phase, PodPhase::Absent);
    }
}
