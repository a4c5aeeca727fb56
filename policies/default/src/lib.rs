//! etcd-steward's default status policy.
