//! The pull before each start of a container (init or regular) whose
//! image comes from a registry, and the kubelet's back-off after a failed one: the container
//! waits with `ErrImagePull` (the failure's message), then
//! `ImagePullBackOff` until the next attempt, which shows `ErrImagePull`
//! again if it fails too.

use std::time::Duration;

use tokio::task::{JoinError, JoinHandle};
use tokio::time::Instant;

use super::super::images::{self, PullError, PullPolicy, PulledImage};
use super::Worker;

pub(super) type PullTask = JoinHandle<Result<PulledImage, PullError>>;

/// How long `ErrImagePull` shows before `ImagePullBackOff` (at most the
/// back-off itself): a kubelet shows the error on the sync that failed and
/// the back-off on the syncs after.
const ERR_IMAGE_PULL_SHOWN: Duration = Duration::from_secs(1);

pub(super) enum PullWait {
    /// Show `ImagePullBackOff`, then pull again at `retry_at`.
    BackOff { retry_at: Instant, message: String },
    /// Pull again now.
    Retry,
}

impl Worker {
    pub(super) fn begin_pull(&mut self) {
        let container = &self.cur_ref().container;
        let image = container.image.clone().unwrap_or_default();
        let policy = PullPolicy::of(container);
        tracing::debug!(pod = %format!("{}/{}", self.ns, self.name), %image, ?policy, "pulling");
        self.pulling = Some(tokio::spawn(images::ensure(
            self.node.images.clone(),
            self.node.client.clone(),
            self.pod.clone(),
            image,
            policy,
        )));
    }

    pub(super) fn on_pulled(&mut self, r: Result<Result<PulledImage, PullError>, JoinError>) {
        self.pulling = None;
        let r = r.unwrap_or_else(|e| {
            Err(PullError {
                reason: "ErrImagePull",
                message: format!("the pull stopped: {e}"),
            })
        });
        match r {
            Ok(image) => {
                self.pull_backoff = Duration::ZERO;
                let slot = self.cur();
                slot.image_id = Some(image.image_id.clone());
                slot.pulled = Some(image);
                self.start_container();
            }
            Err(e) => {
                tracing::warn!(pod = %format!("{}/{}", self.ns, self.name), "{}: {}", e.reason, e.message);
                self.cur().waiting = (e.reason.into(), Some(e.message.clone()));
                if e.reason == "InvalidImageName" {
                    // Nothing to retry until the Pod changes, as a kubelet.
                    return;
                }
                let cfg = &self.node.config;
                let delay = if self.pull_backoff.is_zero() {
                    cfg.image_pull_backoff
                } else {
                    (self.pull_backoff * 2).min(cfg.max_image_pull_backoff)
                };
                self.pull_backoff = delay;
                let now = Instant::now();
                self.pull_wait = Some(if e.reason == "ErrImagePull" {
                    (
                        now + ERR_IMAGE_PULL_SHOWN.min(delay),
                        PullWait::BackOff {
                            retry_at: now + delay,
                            message: e.message,
                        },
                    )
                } else {
                    // ErrImageNeverPull stays as it is; the image is looked
                    // for again (another Pod may pull it).
                    (now + delay, PullWait::Retry)
                });
            }
        }
    }

    pub(super) fn on_pull_wait(&mut self) {
        match self.pull_wait.take() {
            Some((_, PullWait::BackOff { retry_at, message })) => {
                let slot = self.cur();
                let image = slot.container.image.clone().unwrap_or_default();
                slot.waiting = (
                    "ImagePullBackOff".into(),
                    Some(format!(
                        "Back-off pulling image {image:?}: ErrImagePull: {message}"
                    )),
                );
                self.pull_wait = Some((retry_at, PullWait::Retry));
            }
            Some((_, PullWait::Retry)) => self.start_container(),
            None => {}
        }
    }

    pub(super) fn stop_pulling(&mut self) {
        if let Some(task) = self.pulling.take() {
            task.abort();
        }
        self.pull_wait = None;
    }
}
