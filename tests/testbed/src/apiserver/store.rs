//! The object store: every object of every resource, one global
//! monotonically increasing resourceVersion, and a bounded per-resource
//! event log that watches resume from. It knows nothing of Kubernetes
//! semantics beyond that; `lifecycle` builds those on top.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;

use serde_json::Value;
use tokio::sync::broadcast;

use super::resources::{ResKey, ResourceType, builtins};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Added => "ADDED",
            Self::Modified => "MODIFIED",
            Self::Deleted => "DELETED",
        }
    }
}

/// One change, as every watch sees it. `old` lets a filtered watch turn a
/// change that leaves its selector into a DELETED.
#[derive(Debug)]
pub struct Event {
    pub rv: u64,
    pub key: ResKey,
    pub kind: EventType,
    pub object: Value,
    pub old: Option<Value>,
}

#[derive(Default)]
struct EventLog {
    events: VecDeque<Arc<Event>>,
    /// Every event at or below this version has been dropped from `events`.
    compacted: u64,
}

/// Namespace ("" for cluster-scoped) and name.
pub type ObjKey = (String, String);

pub struct Store {
    rv: u64,
    pub types: BTreeMap<ResKey, ResourceType>,
    objects: HashMap<ResKey, BTreeMap<ObjKey, Value>>,
    logs: HashMap<ResKey, EventLog>,
    log_capacity: usize,
    events: broadcast::Sender<Arc<Event>>,
}

/// The watch asked for history the log no longer holds.
#[derive(Debug)]
pub struct TooOld {
    pub requested: u64,
    pub oldest: u64,
}

impl Store {
    pub fn new(log_capacity: usize) -> Self {
        let (events, _) = broadcast::channel(8192);
        let types = builtins().into_iter().map(|t| (t.key(), t)).collect();
        Self {
            rv: 1,
            types,
            objects: HashMap::new(),
            logs: HashMap::new(),
            log_capacity: log_capacity.max(1),
            events,
        }
    }

    pub fn current_rv(&self) -> u64 {
        self.rv
    }

    pub fn get(&self, key: &ResKey, ns: &str, name: &str) -> Option<&Value> {
        self.objects
            .get(key)?
            .get(&(ns.to_string(), name.to_string()))
    }

    /// Objects of one resource, in (namespace, name) order; `ns` None means
    /// every namespace.
    pub fn list<'a>(
        &'a self,
        key: &ResKey,
        ns: Option<&'a str>,
    ) -> impl Iterator<Item = &'a Value> + 'a {
        self.objects
            .get(key)
            .into_iter()
            .flat_map(|m| m.iter())
            .filter(move |((n, _), _)| ns.is_none_or(|want| want == n))
            .map(|(_, v)| v)
    }

    /// Every stored object of every resource, for garbage collection.
    pub fn all(&self) -> impl Iterator<Item = (&ResKey, &Value)> {
        self.objects
            .iter()
            .flat_map(|(k, m)| m.values().map(move |v| (k, v)))
    }

    /// Writes `obj` under a fresh resourceVersion and tells every watch.
    pub fn put(&mut self, key: &ResKey, mut obj: Value) -> Value {
        self.rv += 1;
        let rv = self.rv;
        obj["metadata"]["resourceVersion"] = Value::String(rv.to_string());
        let okey = obj_key(&obj);
        let old = self
            .objects
            .entry(key.clone())
            .or_default()
            .insert(okey, obj.clone());
        let kind = if old.is_some() {
            EventType::Modified
        } else {
            EventType::Added
        };
        self.record(Event {
            rv,
            key: key.clone(),
            kind,
            object: obj.clone(),
            old,
        });
        obj
    }

    /// Removes an object; its last state carries the deletion's version.
    pub fn remove(&mut self, key: &ResKey, ns: &str, name: &str) -> Option<Value> {
        let mut obj = self
            .objects
            .get_mut(key)?
            .remove(&(ns.to_string(), name.to_string()))?;
        self.rv += 1;
        let rv = self.rv;
        obj["metadata"]["resourceVersion"] = Value::String(rv.to_string());
        self.record(Event {
            rv,
            key: key.clone(),
            kind: EventType::Deleted,
            object: obj.clone(),
            old: None,
        });
        Some(obj)
    }

    fn record(&mut self, event: Event) {
        let event = Arc::new(event);
        let log = self.logs.entry(event.key.clone()).or_default();
        log.events.push_back(event.clone());
        while log.events.len() > self.log_capacity {
            if let Some(dropped) = log.events.pop_front() {
                log.compacted = dropped.rv;
            }
        }
        // No receivers is fine: nobody is watching.
        let _ = self.events.send(event);
    }

    /// Events of one resource after `rv`, or TooOld when some were dropped.
    pub fn since(&self, key: &ResKey, rv: u64) -> Result<Vec<Arc<Event>>, TooOld> {
        let Some(log) = self.logs.get(key) else {
            return Ok(Vec::new());
        };
        if rv < log.compacted {
            return Err(TooOld {
                requested: rv,
                oldest: log.compacted + 1,
            });
        }
        Ok(log.events.iter().filter(|e| e.rv > rv).cloned().collect())
    }

    /// A receiver that sees every event recorded after this call; take it
    /// under the same lock as the snapshot so no event falls in between.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Event>> {
        self.events.subscribe()
    }

    /// Forgets all watch history of every resource, as an etcd compaction
    /// would; watches from older versions then get 410.
    pub fn compact(&mut self) {
        for log in self.logs.values_mut() {
            if let Some(last) = log.events.back() {
                log.compacted = last.rv;
            }
            log.events.clear();
        }
        for key in self.types.keys() {
            self.logs.entry(key.clone()).or_default().compacted = self.rv;
        }
    }

    pub fn drop_resource(&mut self, key: &ResKey) -> Vec<Value> {
        let names: Vec<ObjKey> = self
            .objects
            .get(key)
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default();
        names
            .into_iter()
            .filter_map(|(ns, name)| self.remove(key, &ns, &name))
            .collect()
    }
}

pub fn obj_key(obj: &Value) -> ObjKey {
    let md = &obj["metadata"];
    (
        md["namespace"].as_str().unwrap_or("").to_string(),
        md["name"].as_str().unwrap_or("").to_string(),
    )
}
