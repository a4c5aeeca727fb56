//! etcd-steward's test control plane: the real kube-apiserver,
//! kube-controller-manager and kube-scheduler, a local kubelet that runs
//! real etcd processes as the one Node, and a fault-injecting proxy. For
//! tests and the local sandbox only; the operator never uses it in its
//! in-cluster path. See docs/control-plane.md.

pub mod cert_manager;
pub mod component;
pub mod control_plane;
pub mod etcd_bin;
pub mod etcd_tls;
pub mod fault_proxy;
pub mod hosts;
pub mod kube_bin;
pub mod kubelet;
pub mod namespace;
pub mod pki;
pub mod registry;
pub mod repo;
pub mod s3;
pub mod sdk_examples;
pub mod service_proxy;
pub mod status_consumers;

pub use control_plane::{ControlPlane, run_control_plane_only};
pub use fault_proxy::{FailWith, FaultProxy, Faults, Verb};
