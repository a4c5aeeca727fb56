//! The Pod status the worker reports: phase, the four Pod conditions with
//! their transition times, and the container's state, as a kubelet writes
//! them through the status subresource.

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};
use std::time::Duration;
use tokio::time::Instant;

use super::{Worker, now};

impl Worker {
    /// One Pod condition; its lastTransitionTime moves only when its
    /// status does.
    pub(super) fn condition(
        &mut self,
        kind: &'static str,
        status: bool,
        reason: Option<&str>,
    ) -> Value {
        let at = now();
        let entry = self.transitions.entry(kind).or_insert((status, at));
        if entry.0 != status {
            *entry = (status, at);
        }
        let mut c = json!({
            "type": kind,
            "status": if status { "True" } else { "False" },
            "lastProbeTime": null,
            "lastTransitionTime": entry.1.to_string(),
        });
        if let Some(r) = reason {
            c["reason"] = json!(r);
        }
        c
    }

    /// The status a kubelet reports for this Pod's one container.
    pub(super) fn status(&mut self) -> Value {
        let terminal = matches!(self.phase, "Succeeded" | "Failed");
        let ready = self.ready && self.child.is_some() && !terminal;
        let not_ready_reason = if terminal {
            Some("PodCompleted")
        } else if ready {
            None
        } else {
            Some("ContainersNotReady")
        };
        let state = if let Some(t) = &self.terminated {
            t.clone()
        } else if let (Some(_), Some(at)) = (&self.child, self.started_at) {
            json!({"running": {"startedAt": at.to_string()}})
        } else {
            let (reason, message) = &self.waiting;
            json!({"waiting": {"reason": reason, "message": message}})
        };
        let image_id = if self.pulls {
            // As a kubelet: the digest the reference resolved to, once pulled.
            self.image_id.clone().unwrap_or_default()
        } else {
            format!(
                "local://{}",
                self.plan
                    .as_ref()
                    .map_or(self.node.releases.default().etcd.as_path(), |p| p
                        .program
                        .as_path())
                    .display()
            )
        };
        let container = json!({
            "name": self.container.name,
            "image": self.container.image.clone().unwrap_or_default(),
            "imageID": image_id,
            "containerID": self.pid.map(|p| format!("local://{p}")),
            "ready": ready,
            "started": self.child.is_some(),
            "restartCount": self.restart_count,
            "state": state,
            "lastState": self.last_state.clone().unwrap_or_else(|| json!({})),
        });
        let ip = self.ip.to_string();
        let host_ip = self.node.host_ip.to_string();
        let conditions = vec![
            self.condition("PodScheduled", true, None),
            self.condition("Initialized", true, None),
            self.condition("ContainersReady", ready, not_ready_reason),
            self.condition("Ready", ready, not_ready_reason),
        ];
        json!({
            "phase": self.phase,
            "conditions": conditions,
            "hostIP": host_ip,
            "hostIPs": [{"ip": host_ip}],
            "podIP": ip,
            "podIPs": [{"ip": ip}],
            "startTime": self.start_time.to_string(),
            "containerStatuses": [container],
        })
    }

    /// Writes the Pod's status through the status subresource when it
    /// differs from what was last written; a 404 means the Pod is gone.
    pub(super) async fn publish(&mut self) {
        if self.gone || self.status_retry_at.is_some() {
            return;
        }
        let status = self.status();
        if self.last_written.as_ref() == Some(&status) {
            return;
        }
        let api: Api<Pod> = Api::namespaced(self.node.client.clone(), &self.ns);
        let patch = json!({ "status": status });
        match api
            .patch_status(&self.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => self.last_written = Some(status),
            Err(kube::Error::Api(s)) if s.code == 404 => {
                self.gone = true;
                if !self.deleting {
                    self.begin_delete().await;
                }
            }
            Err(e) => {
                tracing::debug!("writing the status of {}/{}: {e}", self.ns, self.name);
                self.status_retry_at = Some(Instant::now() + Duration::from_millis(500));
            }
        }
    }
}
