//! etcd-steward's test control plane: a Kubernetes API stand-in and a local
//! kubelet that runs real etcd processes. For tests and the local sandbox
//! only; the operator never uses it in its in-cluster path.

pub mod apiserver;
pub mod control_plane;
pub mod etcd_bin;
pub mod hosts;
pub mod kubelet;
pub mod namespace;

pub use apiserver::ApiServer;
pub use control_plane::{ControlPlane, run_control_plane_only};
