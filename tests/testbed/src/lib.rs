//! etcd-steward's test control plane: a Kubernetes API stand-in and a local
//! kubelet that runs real etcd processes. For tests and the local sandbox
//! only; the operator never uses it in its in-cluster path.

pub mod apiserver;

pub use apiserver::ApiServer;
