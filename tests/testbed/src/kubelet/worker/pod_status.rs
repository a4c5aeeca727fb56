//! The Pod status the worker reports: phase, the four Pod conditions with
//! their transition times, and the state of its init containers and its
//! container, as a kubelet writes them through the status subresource.

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};
use std::time::Duration;
use tokio::time::Instant;

use super::{Slot, Worker, now};

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

    /// One entry of `containerStatuses` or `initContainerStatuses`.
    /// `running`: its process is the one running now.
    fn container_status(&self, slot: &Slot, running: bool, ready: bool) -> Value {
        let state = if let Some(t) = &slot.terminated {
            t.clone()
        } else if let (true, Some(at)) = (running, slot.started_at) {
            json!({"running": {"startedAt": at.to_string()}})
        } else {
            let (reason, message) = &slot.waiting;
            json!({"waiting": {"reason": reason, "message": message}})
        };
        let image_id = if slot.pulls {
            // As a kubelet: the digest the reference resolved to, once pulled.
            slot.image_id.clone().unwrap_or_default()
        } else if let Some(plan) = &slot.plan {
            format!("local://{}", plan.program.display())
        } else if slot.init {
            // Not started yet: nothing pulled, as a kubelet shows it.
            String::new()
        } else {
            format!("local://{}", self.node.releases.default().etcd.display())
        };
        json!({
            "name": slot.container.name,
            "image": slot.container.image.clone().unwrap_or_default(),
            "imageID": image_id,
            "containerID": slot.container_id,
            "ready": ready,
            "started": running,
            "restartCount": slot.restart_count,
            "state": state,
            "lastState": slot.last_state.clone().unwrap_or_else(|| json!({})),
        })
    }

    /// The status a kubelet reports for this Pod: its init containers',
    /// then its one regular container's.
    pub(super) fn status(&mut self) -> Value {
        let terminal = matches!(self.phase, "Succeeded" | "Failed");
        let main_running = self.initialized() && self.child.is_some();
        let ready = self.ready && main_running && !terminal;
        let not_ready_reason = if terminal {
            Some("PodCompleted")
        } else if ready {
            None
        } else {
            Some("ContainersNotReady")
        };
        let container = self.container_status(&self.main, main_running, ready);
        let inits: Vec<Value> = self
            .inits
            .iter()
            .enumerate()
            .map(|(i, slot)| {
                let running = i == self.init_done && self.child.is_some();
                // A completed init container is ready, as the kubelet
                // reports it.
                self.container_status(slot, running, slot.completed())
            })
            .collect();
        // As the kubelet's GeneratePodInitializedCondition: False until
        // every init container has completed, naming those that have not.
        let incomplete: Vec<String> = self
            .inits
            .iter()
            .filter(|s| !s.completed())
            .map(|s| s.container.name.clone())
            .collect();
        let mut initialized = if incomplete.is_empty() {
            self.condition("Initialized", true, None)
        } else {
            self.condition("Initialized", false, Some("ContainersNotInitialized"))
        };
        if !incomplete.is_empty() {
            initialized["message"] = json!(format!(
                "containers with incomplete status: [{}]",
                incomplete.join(" ")
            ));
        }
        let ip = self.ip.to_string();
        let host_ip = self.node.host_ip.to_string();
        let conditions = vec![
            self.condition("PodScheduled", true, None),
            initialized,
            self.condition("ContainersReady", ready, not_ready_reason),
            self.condition("Ready", ready, not_ready_reason),
        ];
        let mut status = json!({
            "phase": self.phase,
            "conditions": conditions,
            "hostIP": host_ip,
            "hostIPs": [{"ip": host_ip}],
            "podIP": ip,
            "podIPs": [{"ip": ip}],
            "startTime": self.start_time.to_string(),
            "containerStatuses": [container],
        });
        if !inits.is_empty() {
            status["initContainerStatuses"] = json!(inits);
        }
        status
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
