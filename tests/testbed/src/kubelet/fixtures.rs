//! A static etcd cluster built the way the operator builds one: a headless
//! Service, one PVC per member and one Pod per member whose container runs
//! `etcd` with the members' DNS names in `--initial-cluster`. Tests create
//! these objects through the API and let the kubelet run them.

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Service};
use serde_json::json;

/// Names and knobs of a hand-made etcd cluster.
#[derive(Debug, Clone)]
pub struct StaticCluster {
    pub namespace: String,
    /// Service name, Pod-name prefix and `--initial-cluster-token`.
    pub name: String,
    pub replicas: usize,
    /// `Never` (the operator's choice: a dead member stays dead) or `Always`.
    pub restart_policy: String,
    /// Seconds between readiness probes (the liveness probe is generous).
    pub readiness_period: i32,
}

impl StaticCluster {
    pub fn new(namespace: &str, name: &str, replicas: usize) -> Self {
        StaticCluster {
            namespace: namespace.into(),
            name: name.into(),
            replicas,
            restart_policy: "Never".into(),
            readiness_period: 1,
        }
    }

    pub fn member(&self, i: usize) -> String {
        format!("{}-{i}", self.name)
    }

    pub fn claim(&self, i: usize) -> String {
        format!("data-{}", self.member(i))
    }

    /// The DNS name of member `i`, as in its advertise URLs.
    pub fn host(&self, i: usize) -> String {
        format!("{}.{}.{}.svc", self.member(i), self.name, self.namespace)
    }

    pub fn client_url(&self, i: usize) -> String {
        format!("http://{}:2379", self.host(i))
    }

    pub fn initial_cluster(&self) -> String {
        (0..self.replicas)
            .map(|i| format!("{}=http://{}:2380", self.member(i), self.host(i)))
            .collect::<Vec<_>>()
            .join(",")
    }

    pub fn service(&self) -> Service {
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": self.name, "namespace": self.namespace, "labels": {"app": self.name}},
            "spec": {
                "clusterIP": "None",
                "publishNotReadyAddresses": true,
                "selector": {"app": self.name},
                "ports": [{"name": "client", "port": 2379}, {"name": "peer", "port": 2380}],
            }
        }))
        .expect("a valid Service")
    }

    pub fn claim_object(&self, i: usize) -> PersistentVolumeClaim {
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": self.claim(i), "namespace": self.namespace, "labels": {"app": self.name}},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
        }))
        .expect("a valid PersistentVolumeClaim")
    }

    /// Member `i`'s Pod; `state` is `new` or `existing`.
    pub fn pod(&self, i: usize, state: &str) -> Pod {
        let member = self.member(i);
        let host = self.host(i);
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": member, "namespace": self.namespace, "labels": {"app": self.name}},
            "spec": {
                "hostname": member,
                "subdomain": self.name,
                "restartPolicy": self.restart_policy,
                "terminationGracePeriodSeconds": 30,
                "containers": [{
                    "name": "etcd",
                    "image": "registry.k8s.io/etcd:3.6.17-0",
                    "command": ["etcd"],
                    "args": [
                        "--name=$(POD_NAME)",
                        "--data-dir=/var/lib/etcd",
                        "--listen-client-urls=http://0.0.0.0:2379",
                        "--listen-peer-urls=http://0.0.0.0:2380",
                        "--listen-metrics-urls=http://0.0.0.0:2381",
                        format!("--advertise-client-urls=http://{host}:2379"),
                        format!("--initial-advertise-peer-urls=http://{host}:2380"),
                        format!("--initial-cluster={}", self.initial_cluster()),
                        format!("--initial-cluster-state={state}"),
                        format!("--initial-cluster-token={}", self.name),
                    ],
                    "env": [
                        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                        {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                    ],
                    "ports": [
                        {"name": "client", "containerPort": 2379},
                        {"name": "peer", "containerPort": 2380},
                        {"name": "metrics", "containerPort": 2381},
                    ],
                    "volumeMounts": [{"name": "data", "mountPath": "/var/lib/etcd"}],
                    "readinessProbe": {
                        "httpGet": {"path": "/health", "port": 2381},
                        "periodSeconds": self.readiness_period, "timeoutSeconds": 1, "failureThreshold": 3,
                    },
                    "livenessProbe": {
                        "httpGet": {"path": "/health?serializable=true", "port": 2381},
                        "initialDelaySeconds": 10, "periodSeconds": 10, "timeoutSeconds": 5, "failureThreshold": 8,
                    },
                }],
                "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": self.claim(i)}}],
            }
        }))
        .expect("a valid Pod")
    }
}
