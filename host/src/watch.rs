//! The watch layer: every kind the operator reads is watched once per
//! process, cached once, and fanned out to every controller that needs it.
//!
//! Guarantees:
//! - One watch per kind. The kinds are listed once, in the [`kinds!`] call
//!   below; adding a kind is one line there. The caches the stages read
//!   ([`Watches`]' stores) and the triggers of the three controllers come
//!   from that one watch.
//! - A subscriber sees every object the cache holds when it subscribes, then
//!   every object applied or deleted after: a standby replica that wins the
//!   Lease reconciles every existing object once, from warm caches.
//! - Deletions reach subscribers too, with the object's last state: a
//!   deleted Pod or EtcdMember triggers its owner at once, and
//!   [`Watch::deletions`] lets per-object state be pruned.
//! - Nothing is dropped while a controller subscribes: a full channel holds
//!   the watch back (backpressure), as kube-runtime's shared stores do.
//!
//! Why not kube-runtime's `reflector::store_shared` as it is (5.0): its
//! dispatcher forwards applies only, so a deleted Pod would trigger nobody
//! until a resync; a subscriber that reads the reference of an object
//! deleted in between returns `Pending` without registering a waker, which
//! stalls that controller's trigger for good; and a subscriber created
//! after the first list (a standby winning the Lease) never sees the objects
//! listed before it. The fan-out here is the same `async_broadcast` channel,
//! carrying the objects themselves.

use std::collections::HashMap;
use std::sync::Arc;

use async_broadcast::{InactiveReceiver, Sender};
use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, Pod, Secret, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, PartialObjectMeta};
use kube::runtime::reflector::{self, Store, store::Writer};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};

use crate::api::{EtcdBackupSchedule, EtcdCluster, EtcdMember, EtcdSnapshot, EtcdStatusPolicy};

/// How many changes a slow subscriber may trail by before the watch waits.
const BUFFER: usize = 1024;

/// One object applied or deleted, after the cache took it in.
#[derive(Debug)]
pub struct Change<K> {
    pub object: Arc<K>,
    pub deleted: bool,
}

impl<K> Clone for Change<K> {
    fn clone(&self) -> Self {
        Self {
            object: self.object.clone(),
            deleted: self.deleted,
        }
    }
}

/// One kind's cache and its changes.
pub struct Watch<K>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    store: Store<K>,
    changes: Sender<Change<K>>,
    // Keeps the channel open while no controller subscribes (a standby).
    _open: InactiveReceiver<Change<K>>,
}

impl<K> Watch<K>
where
    K: Resource + Clone + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone + Default,
{
    fn new() -> (Self, Writer<K>) {
        let (store, writer) = reflector::store();
        let (mut changes, open) = async_broadcast::broadcast(BUFFER);
        // With no subscriber, a change is only cached: a later subscriber
        // starts from the cache anyway.
        changes.set_await_active(false);
        let watch = Self {
            store,
            changes,
            _open: open.deactivate(),
        };
        (watch, writer)
    }

    /// The cache.
    pub fn store(&self) -> &Store<K> {
        &self.store
    }

    /// Every object in the cache now, then every change after.
    pub fn changes(&self) -> impl Stream<Item = Change<K>> + Send + 'static {
        // Subscribe before reading the cache: a change between the two is
        // seen twice rather than never (a controller folds duplicates).
        let after = self.changes.new_receiver();
        let now: Vec<Change<K>> = self
            .store
            .state()
            .into_iter()
            .map(|object| Change {
                object,
                deleted: false,
            })
            .collect();
        futures::stream::iter(now).chain(after)
    }

    /// Every object now and every object applied or deleted later: a
    /// controller's trigger.
    pub fn subscribe(&self) -> impl Stream<Item = Arc<K>> + Send + 'static {
        self.changes().map(|c| c.object)
    }

    /// The same, but an applied object only when `key` of it moved since
    /// this subscriber last saw it (for instance its generation: a status
    /// write is then no trigger). Deletions always pass.
    pub fn subscribe_when(
        &self,
        key: impl Fn(&K) -> Option<u64> + Send + 'static,
    ) -> impl Stream<Item = Arc<K>> + Send + 'static {
        let mut seen: HashMap<String, u64> = HashMap::new();
        self.changes().filter_map(move |c| {
            let id = c.object.uid().unwrap_or_else(|| c.object.name_any());
            let pass = if c.deleted {
                seen.remove(&id);
                true
            } else {
                match key(&c.object) {
                    Some(k) => seen.insert(id, k) != Some(k),
                    None => true,
                }
            };
            futures::future::ready(pass.then_some(c.object))
        })
    }

    /// Every object deleted from now on.
    pub fn deletions(&self) -> impl Stream<Item = Arc<K>> + Send + 'static {
        self.changes
            .new_receiver()
            .filter_map(|c| futures::future::ready(c.deleted.then_some(c.object)))
    }

    /// The task that keeps the cache and the subscribers current.
    fn run<S>(&self, events: S, writer: Writer<K>) -> impl Future<Output = ()> + Send + 'static
    where
        S: Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
    {
        let changes = self.changes.clone();
        events
            .default_backoff()
            .reflect(writer)
            .for_each(move |event| {
                let changes = changes.clone();
                async move {
                    let touched: Vec<Change<K>> = match event {
                        Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => {
                            vec![Change {
                                object: Arc::new(o),
                                deleted: false,
                            }]
                        }
                        Ok(watcher::Event::Delete(o)) => vec![Change {
                            object: Arc::new(o),
                            deleted: true,
                        }],
                        Ok(watcher::Event::Init | watcher::Event::InitDone) => Vec::new(),
                        Err(err) => {
                            tracing::warn!(kind = %K::kind(&Default::default()), error = %err, "watch failed; retrying");
                            Vec::new()
                        }
                    };
                    for change in touched {
                        // Err only when nobody subscribes: the cache has it.
                        let _ = changes.broadcast_direct(change).await;
                    }
                }
            })
    }
}

/// Where the watches look: the operator's scope for clusters and their
/// children, its own namespace for policy sources.
pub struct Sources {
    pub client: Client,
    /// The namespace the operator manages (all when `None`).
    pub namespace: Option<String>,
    /// The operator's own namespace: policy ConfigMaps and pull Secrets.
    pub operator_namespace: String,
}

impl Sources {
    /// The kind in the operator's scope.
    pub fn scoped<K>(&self) -> Api<K>
    where
        K: Resource<Scope = kube::core::NamespaceResourceScope>,
        K::DynamicType: Default,
    {
        match &self.namespace {
            Some(ns) => Api::namespaced(self.client.clone(), ns),
            None => Api::all(self.client.clone()),
        }
    }

    /// The kind in the operator's own namespace.
    pub fn own<K>(&self) -> Api<K>
    where
        K: Resource<Scope = kube::core::NamespaceResourceScope>,
        K::DynamicType: Default,
    {
        Api::namespaced(self.client.clone(), &self.operator_namespace)
    }

    /// A cluster-scoped kind.
    pub fn cluster<K>(&self) -> Api<K>
    where
        K: Resource<Scope = kube::core::ClusterResourceScope>,
        K::DynamicType: Default,
    {
        Api::all(self.client.clone())
    }
}

/// The objects the operator created carry this label; only they are watched.
pub fn managed() -> watcher::Config {
    watcher::Config::default().labels("app.kubernetes.io/managed-by=etcd-steward")
}

/// Declares the watched kinds: the [`Watches`] struct, its [`Writers`] for
/// tests, and [`Watches::start`], from one line per kind.
macro_rules! kinds {
    (|$s:ident| $( $(#[$doc:meta])* $field:ident: $kind:ty = $events:expr; )*) => {
        /// One [`Watch`] per kind the operator reads.
        pub struct Watches {
            $( $(#[$doc])* pub $field: Watch<$kind>, )*
            tasks: Vec<tokio::task::JoinHandle<()>>,
        }

        /// The writing ends of a test's caches (nothing watches).
        pub struct Writers {
            $( pub $field: Writer<$kind>, )*
        }

        impl Watches {
            /// Starts one watch per kind. The caches fill in the background;
            /// see [`Watches::wait_until_ready`].
            pub fn start($s: &Sources) -> Self {
                let mut tasks = Vec::new();
                $(
                    let ($field, writer) = Watch::<$kind>::new();
                    tasks.push(tokio::spawn($field.run($events, writer)));
                )*
                Self { $( $field, )* tasks }
            }

            /// Empty caches and no watches, for unit tests: fill the caches
            /// through the writers.
            pub fn for_tests() -> (Self, Writers) {
                $( let $field = Watch::<$kind>::new(); )*
                (
                    Self { $( $field: $field.0, )* tasks: Vec::new() },
                    Writers { $( $field: $field.1, )* },
                )
            }

            /// Returns once every cache holds a first full list.
            pub async fn wait_until_ready(&self) -> Result<(), reflector::store::WriterDropped> {
                $( self.$field.store.wait_until_ready().await?; )*
                Ok(())
            }

        }
    };
}

kinds! { |s|
    clusters: EtcdCluster = watcher(s.scoped(), watcher::Config::default());
    /// All of them, owned or not: a member names its cluster in its spec.
    members: EtcdMember = watcher(s.scoped(), watcher::Config::default());
    pods: Pod = watcher(s.scoped(), managed());
    pvcs: PersistentVolumeClaim = watcher(s.scoped(), managed());
    services: Service = watcher(s.scoped(), managed());
    pdbs: PodDisruptionBudget = watcher(s.scoped(), managed());
    status_policies: EtcdStatusPolicy = watcher(s.cluster(), watcher::Config::default());
    snapshots: EtcdSnapshot = watcher(s.scoped(), watcher::Config::default());
    schedules: EtcdBackupSchedule = watcher(s.scoped(), watcher::Config::default());
    /// Policy sources and CA bundles, by metadata: the reconcile reads the
    /// one a policy names.
    config_maps: PartialObjectMeta<ConfigMap> = watcher(s.own(), watcher::Config::default());
    /// Pull Secrets only, by metadata. kubectl's last-applied annotation can
    /// repeat a Secret's data even in its metadata, so no other Secret of
    /// the namespace is watched at all.
    pull_secrets: PartialObjectMeta<Secret> = watcher(
        s.own(),
        watcher::Config::default()
            .fields(&format!("type={}", crate::policy::source::PULL_SECRET_TYPE)),
    );
}

impl Drop for Watches {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;
    use k8s_openapi::api::core::v1::ConfigMap;

    fn cm(name: &str, generation: i64) -> ConfigMap {
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some(name.into());
        cm.metadata.namespace = Some("ns".into());
        cm.metadata.uid = Some(format!("uid-{name}"));
        cm.metadata.generation = Some(generation);
        cm
    }

    /// Feeds `events` through the watch, as the apiserver's watch would.
    async fn feed(
        watch: &Watch<ConfigMap>,
        writer: Writer<ConfigMap>,
        events: Vec<watcher::Event<ConfigMap>>,
    ) {
        watch
            .run(futures::stream::iter(events.into_iter().map(Ok)), writer)
            .await;
    }

    fn names(changes: &[Change<ConfigMap>]) -> Vec<String> {
        changes
            .iter()
            .map(|c| {
                format!(
                    "{}{}",
                    if c.deleted { "-" } else { "+" },
                    c.object.name_any()
                )
            })
            .collect()
    }

    /// Everything a stream has ready now.
    fn ready<T>(stream: &mut (impl Stream<Item = T> + Unpin)) -> Vec<T> {
        let mut out = Vec::new();
        while let Some(Some(item)) = stream.next().now_or_never() {
            out.push(item);
        }
        out
    }

    #[tokio::test]
    async fn a_late_subscriber_gets_the_cache_first_then_every_change_deletions_included() {
        let (watch, writer) = Watch::<ConfigMap>::new();
        let (tx, rx) = futures::channel::mpsc::unbounded();
        let task = tokio::spawn(watch.run(rx.map(Ok), writer));
        for e in [
            watcher::Event::Init,
            watcher::Event::InitApply(cm("a", 1)),
            watcher::Event::InitApply(cm("b", 1)),
            watcher::Event::InitDone,
        ] {
            tx.unbounded_send(e).unwrap();
        }
        watch.store().wait_until_ready().await.unwrap();
        while watch.store().state().len() < 2 {
            tokio::task::yield_now().await;
        }

        // Subscribed after the first list: a standby that won the Lease.
        let mut changes = Box::pin(watch.changes());
        let mut first = names(&ready(&mut changes));
        first.sort();
        assert_eq!(first, ["+a", "+b"], "the cache, replayed");

        tx.unbounded_send(watcher::Event::Apply(cm("c", 1)))
            .unwrap();
        tx.unbounded_send(watcher::Event::Delete(cm("a", 1)))
            .unwrap();
        let mut later = Vec::new();
        while later.len() < 2 {
            later.push(changes.next().await.unwrap());
        }
        assert_eq!(names(&later), ["+c", "-a"]);
        assert!(
            watch
                .store()
                .get(&reflector::ObjectRef::new("a").within("ns"))
                .is_none(),
            "the cache took the deletion in before subscribers heard of it"
        );
        drop(tx);
        task.await.unwrap();
    }

    #[tokio::test]
    async fn a_filtered_subscription_passes_only_moves_of_its_key_and_every_deletion() {
        let (watch, writer) = Watch::<ConfigMap>::new();
        let mut subscription =
            Box::pin(watch.subscribe_when(|c: &ConfigMap| c.metadata.generation.map(|g| g as u64)));
        feed(
            &watch,
            writer,
            vec![
                watcher::Event::Apply(cm("a", 1)),
                // A status write: the generation did not move.
                watcher::Event::Apply(cm("a", 1)),
                watcher::Event::Apply(cm("a", 2)),
                watcher::Event::Delete(cm("a", 2)),
            ],
        )
        .await;
        let seen: Vec<i64> = ready(&mut subscription)
            .iter()
            .map(|c| c.metadata.generation.unwrap())
            .collect();
        assert_eq!(seen, [1, 2, 2], "the first, the move, the deletion");
    }

    #[tokio::test]
    async fn deletions_lists_only_deleted_objects() {
        let (watch, writer) = Watch::<ConfigMap>::new();
        let mut deletions = Box::pin(watch.deletions());
        feed(
            &watch,
            writer,
            vec![
                watcher::Event::Apply(cm("a", 1)),
                watcher::Event::Apply(cm("b", 1)),
                watcher::Event::Delete(cm("b", 1)),
            ],
        )
        .await;
        let gone: Vec<String> = ready(&mut deletions).iter().map(|c| c.name_any()).collect();
        assert_eq!(gone, ["b"]);
    }
}
