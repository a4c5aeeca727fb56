//! Turning a Pod's etcd container into a local process invocation.
//!
//! The container's command and args are used as written, translated only
//! where a process on this machine needs it: the program becomes the local
//! etcd binary, `$(VAR)` references expand from the container env, wildcard
//! and loopback hosts in `--listen-*` URLs become the Pod's own IP, and
//! volumeMount paths become the directories that back them.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::path::PathBuf;

use k8s_openapi::api::core::v1::{Container, EnvVar, Pod};

use crate::etcd_bin::{EtcdBinaries, EtcdReleases};

/// Why a container cannot be started; becomes the container's waiting
/// reason `CreateContainerConfigError` with this message.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum LaunchError {
    #[error("container {container}: the local kubelet runs only etcd itself, not {program:?}")]
    NotEtcd { container: String, program: String },
    #[error("container {container}: env {var}: {what} is not supported by the local kubelet")]
    UnsupportedEnv {
        container: String,
        var: String,
        what: String,
    },
    #[error("container {container}: envFrom is not supported by the local kubelet")]
    EnvFrom { container: String },
    #[error(
        "container {container}: the local kubelet runs image {image} only with its entrypoint (no command)"
    )]
    NotEntrypoint { container: String, image: String },
    /// The release the image tag names is not on this machine: the
    /// container's waiting reason is `ErrImagePull`, as for a failed pull.
    #[error("container {container}: {message}")]
    ImagePull { container: String, message: String },
}

/// Everything needed to spawn the container's process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchPlan {
    pub program: PathBuf,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    /// (local directory, mountPath) pairs bind-mounted in the process's own
    /// mount namespace. Empty for etcd, whose paths are rewritten instead.
    pub binds: Vec<(PathBuf, String)>,
    /// The etcd release the container's image names: its `etcdctl` and
    /// `etcdutl` serve exec probes, as the image's own would. None for a
    /// local image.
    pub release: Option<EtcdBinaries>,
}

/// An image the kubelet runs as a local program: the operator's image maps
/// to the binary built from this tree, which is what that image contains.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalImage {
    /// The repository part of the image reference (`etcd-steward` in
    /// `etcd-steward:0.1.0` or `example.com/etcd-steward@sha256:…`).
    pub repository: String,
    /// The image's entrypoint, as a local executable.
    pub program: PathBuf,
}

/// The container the kubelet runs for this Pod: the first whose image or
/// program is etcd, or whose image is one of `images`.
pub fn runnable_container<'a>(pod: &'a Pod, images: &[LocalImage]) -> Option<&'a Container> {
    pod.spec
        .as_ref()?
        .containers
        .iter()
        .find(|c| is_etcd(c) || local_image(c, images).is_some())
}

/// The container of `pod` that is etcd, if any.
pub fn etcd_container(pod: &Pod) -> Option<&Container> {
    pod.spec.as_ref()?.containers.iter().find(|c| is_etcd(c))
}

fn local_image<'a>(c: &Container, images: &'a [LocalImage]) -> Option<&'a LocalImage> {
    let name = image_name(c.image.as_deref()?);
    images.iter().find(|i| i.repository == name)
}

fn is_etcd(c: &Container) -> bool {
    let image_says = c.image.as_deref().is_some_and(|i| image_name(i) == "etcd");
    let program_says = c
        .command
        .as_ref()
        .and_then(|c| c.first())
        .is_some_and(|p| basename(p) == "etcd");
    image_says || program_says
}

/// The repository part of an image reference, without registry host or tag.
fn image_name(image: &str) -> &str {
    let no_digest = image.split('@').next().unwrap_or(image);
    let last = no_digest.rsplit('/').next().unwrap_or(no_digest);
    last.split(':').next().unwrap_or(last)
}

/// The release an etcd container runs: the one its image tag names when the
/// image is etcd's, else (a program named etcd in some other image) the
/// default release.
fn release_for(c: &Container, releases: &EtcdReleases) -> Result<EtcdBinaries, LaunchError> {
    match c.image.as_deref().filter(|i| image_name(i) == "etcd") {
        Some(image) => {
            releases
                .for_image(image)
                .cloned()
                .map_err(|message| LaunchError::ImagePull {
                    container: c.name.clone(),
                    message,
                })
        }
        None => Ok(releases.default().clone()),
    }
}

fn basename(p: &str) -> &str {
    p.rsplit('/').next().unwrap_or(p)
}

/// Plans the process for `container` of `pod`, running at `ip`, with each
/// volumeMount path backed by the local directory in `mounts`.
pub fn plan(
    pod: &Pod,
    container: &Container,
    ip: Ipv4Addr,
    host_ip: Ipv4Addr,
    mounts: &[(String, PathBuf)],
    releases: &EtcdReleases,
    images: &[LocalImage],
) -> Result<LaunchPlan, LaunchError> {
    let env = container_env(pod, container, ip, host_ip)?;
    let vars: BTreeMap<&str, &str> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    if let Some(image) = local_image(container, images) {
        // A program of our own, not etcd: its arguments stay as written and
        // its volumes are mounted where it expects them, as in a container.
        if container.command.as_ref().is_some_and(|c| !c.is_empty()) {
            return Err(LaunchError::NotEntrypoint {
                container: container.name.clone(),
                image: image.repository.clone(),
            });
        }
        let args = container
            .args
            .iter()
            .flatten()
            .map(|a| expand(a, &vars))
            .collect();
        let binds = mounts
            .iter()
            .map(|(path, local)| (local.clone(), path.clone()))
            .collect();
        return Ok(LaunchPlan {
            program: image.program.clone(),
            args,
            env,
            binds,
            release: None,
        });
    }

    let bins = release_for(container, releases)?;

    let mut words: Vec<String> = container.command.clone().unwrap_or_default();
    let program = if words.is_empty() {
        // No command: the image's entrypoint, which for an etcd image is etcd.
        bins.etcd.clone()
    } else {
        let first = words.remove(0);
        match basename(&first) {
            "etcd" => bins.etcd.clone(),
            other => {
                return Err(LaunchError::NotEtcd {
                    container: container.name.clone(),
                    program: other.to_string(),
                });
            }
        }
    };
    words.extend(container.args.clone().unwrap_or_default());

    let mut mounts: Vec<&(String, PathBuf)> = mounts.iter().collect();
    // Longest first, so /var/lib/etcd/wal wins over /var/lib/etcd.
    mounts.sort_by_key(|(p, _)| std::cmp::Reverse(p.len()));

    let mut args = Vec::with_capacity(words.len());
    let mut prev_listen_flag = false;
    for word in &words {
        let word = expand(word, &vars);
        let (flag, value) = match word.split_once('=') {
            Some((f, v)) if f.starts_with('-') => (Some(f), v.to_string()),
            _ => (None, word.clone()),
        };
        let listen = flag.is_some_and(is_listen_flag) || (flag.is_none() && prev_listen_flag);
        let mut value = if listen {
            localise_urls(&value, ip)
        } else {
            value
        };
        value = map_path(&value, &mounts);
        prev_listen_flag = flag.is_none() && is_listen_flag(&word);
        args.push(match flag {
            Some(f) => format!("{f}={value}"),
            None => value,
        });
    }
    let env = env
        .into_iter()
        .map(|(k, v)| {
            let v = if k.starts_with("ETCD_LISTEN_") {
                localise_urls(&v, ip)
            } else {
                v
            };
            let v = map_path(&v, &mounts);
            (k, v)
        })
        .collect();
    Ok(LaunchPlan {
        program,
        args,
        env,
        binds: Vec::new(),
        release: Some(bins),
    })
}

fn is_listen_flag(flag: &str) -> bool {
    flag.trim_start_matches('-').starts_with("listen-")
}

/// Replaces wildcard and loopback hosts in a comma-separated URL list by
/// `ip`: inside a Pod they mean "my own address", which here is `ip`.
fn localise_urls(list: &str, ip: Ipv4Addr) -> String {
    list.split(',')
        .map(|url| {
            let Some((scheme, rest)) = url.split_once("://") else {
                return url.to_string();
            };
            let (hostport, path) = match rest.find('/') {
                Some(i) => rest.split_at(i),
                None => (rest, ""),
            };
            let (host, port) = match hostport.rsplit_once(':') {
                Some((h, p)) if !h.is_empty() && !p.contains(']') => (h, Some(p)),
                _ => (hostport, None),
            };
            if matches!(
                host,
                "0.0.0.0" | "[::]" | "::" | "127.0.0.1" | "localhost" | ""
            ) {
                match port {
                    Some(p) => format!("{scheme}://{ip}:{p}{path}"),
                    None => format!("{scheme}://{ip}{path}"),
                }
            } else {
                url.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

fn map_path(value: &str, mounts: &[&(String, PathBuf)]) -> String {
    for (mount, local) in mounts {
        let mount = mount.trim_end_matches('/');
        if let Some(rest) = value.strip_prefix(mount)
            && (rest.is_empty() || rest.starts_with('/'))
        {
            return format!("{}{rest}", local.display());
        }
    }
    value.to_string()
}

/// Kubernetes' `$(VAR)` expansion: defined variables are replaced, `$$` is a
/// literal `$`, and references to undefined variables stay as written.
pub fn expand(s: &str, vars: &BTreeMap<&str, &str>) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(stripped) = after.strip_prefix('$') {
            out.push('$');
            rest = stripped;
        } else if let Some(inner) = after.strip_prefix('(')
            && let Some(end) = inner.find(')')
        {
            let name = &inner[..end];
            match vars.get(name) {
                Some(v) => out.push_str(v),
                None => {
                    out.push_str("$(");
                    out.push_str(name);
                    out.push(')');
                }
            }
            rest = &inner[end + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// The container's environment, in order, with fieldRefs resolved and each
/// value expanded against the variables defined before it.
fn container_env(
    pod: &Pod,
    container: &Container,
    ip: Ipv4Addr,
    host_ip: Ipv4Addr,
) -> Result<Vec<(String, String)>, LaunchError> {
    if container.env_from.as_ref().is_some_and(|e| !e.is_empty()) {
        return Err(LaunchError::EnvFrom {
            container: container.name.clone(),
        });
    }
    let mut env: Vec<(String, String)> = Vec::new();
    for EnvVar {
        name,
        value,
        value_from,
    } in container.env.iter().flatten()
    {
        let unsupported = |what: &str| LaunchError::UnsupportedEnv {
            container: container.name.clone(),
            var: name.clone(),
            what: what.to_string(),
        };
        let raw = match (value, value_from) {
            (Some(v), _) => {
                let vars: BTreeMap<&str, &str> =
                    env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
                expand(v, &vars)
            }
            (None, None) => String::new(),
            (None, Some(from)) => match &from.field_ref {
                Some(f) => field(pod, &f.field_path, ip, host_ip)
                    .ok_or_else(|| unsupported(&format!("fieldRef {}", f.field_path)))?,
                None if from.secret_key_ref.is_some() => return Err(unsupported("secretKeyRef")),
                None if from.config_map_key_ref.is_some() => {
                    return Err(unsupported("configMapKeyRef"));
                }
                None => return Err(unsupported("this valueFrom")),
            },
        };
        env.retain(|(k, _)| k != name);
        env.push((name.clone(), raw));
    }
    Ok(env)
}

pub(crate) fn field(pod: &Pod, path: &str, ip: Ipv4Addr, host_ip: Ipv4Addr) -> Option<String> {
    let meta = &pod.metadata;
    let spec = pod.spec.as_ref();
    let keyed = |prefix: &str, map: Option<&BTreeMap<String, String>>| -> Option<Option<String>> {
        let key = path
            .strip_prefix(prefix)?
            .strip_prefix("['")?
            .strip_suffix("']")?;
        Some(map.and_then(|m| m.get(key).cloned()))
    };
    if let Some(v) = keyed("metadata.labels", meta.labels.as_ref()) {
        return Some(v.unwrap_or_default());
    }
    if let Some(v) = keyed("metadata.annotations", meta.annotations.as_ref()) {
        return Some(v.unwrap_or_default());
    }
    Some(match path {
        "metadata.name" => meta.name.clone().unwrap_or_default(),
        "metadata.namespace" => meta.namespace.clone().unwrap_or_else(|| "default".into()),
        "metadata.uid" => meta.uid.clone().unwrap_or_default(),
        "status.podIP" | "status.podIPs" => ip.to_string(),
        "status.hostIP" | "status.hostIPs" => host_ip.to_string(),
        "spec.nodeName" => spec
            .and_then(|s| s.node_name.clone())
            .unwrap_or_else(|| super::NODE_NAME.into()),
        "spec.serviceAccountName" => spec
            .and_then(|s| s.service_account_name.clone())
            .unwrap_or_default(),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn release(dir: &str) -> EtcdBinaries {
        EtcdBinaries {
            etcd: format!("{dir}/etcd").into(),
            etcdctl: format!("{dir}/etcdctl").into(),
            etcdutl: format!("{dir}/etcdutl").into(),
        }
    }

    /// 3.5.21 (which member_pod's image names) and the default, 3.6.17.
    fn bins() -> EtcdReleases {
        use crate::etcd_bin::Version;
        EtcdReleases::new(
            vec![
                (Version(3, 5, 21), release("/opt/etcd-3.5.21")),
                (Version(3, 6, 17), release("/opt/etcd")),
            ],
            Version(3, 6, 17),
        )
        .unwrap()
    }

    fn member_pod() -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "demo-0", "namespace": "team-a", "uid": "u-1"},
            "spec": {
                "hostname": "demo-0", "subdomain": "demo",
                "containers": [{
                    "name": "etcd", "image": "registry.k8s.io/etcd:3.5.21-0",
                    "command": ["etcd"],
                    "args": [
                        "--name=$(POD_NAME)",
                        "--data-dir=/var/lib/etcd",
                        "--listen-client-urls=http://0.0.0.0:2379,http://127.0.0.1:2379",
                        "--listen-peer-urls=http://0.0.0.0:2380",
                        "--listen-metrics-urls", "http://0.0.0.0:2381",
                        "--advertise-client-urls=http://$(POD_NAME).demo.$(POD_NAMESPACE).svc:2379",
                        "--initial-cluster-token=$$(literal)-$(UNDEFINED)"
                    ],
                    "env": [
                        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                        {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                        {"name": "ETCD_WAL_DIR", "value": "/var/lib/etcd/wal"},
                        {"name": "GREETING", "value": "$(POD_NAME) at $(POD_IP)"}
                    ],
                    "volumeMounts": [{"name": "data", "mountPath": "/var/lib/etcd"}]
                }]
            }
        }))
        .unwrap()
    }

    #[test]
    fn the_operator_container_shape_becomes_a_local_etcd_invocation() {
        let pod = member_pod();
        let c = etcd_container(&pod).unwrap();
        let ip: Ipv4Addr = "127.20.3.4".parse().unwrap();
        let plan = plan(
            &pod,
            c,
            ip,
            Ipv4Addr::LOCALHOST,
            &[("/var/lib/etcd".into(), "/k/pvc/data".into())],
            &bins(),
            &[],
        )
        .unwrap();
        assert_eq!(
            plan.program,
            PathBuf::from("/opt/etcd-3.5.21/etcd"),
            "the release the image tag names"
        );
        assert_eq!(plan.release, Some(release("/opt/etcd-3.5.21")));
        assert_eq!(
            plan.args,
            vec![
                "--name=demo-0",
                "--data-dir=/k/pvc/data",
                "--listen-client-urls=http://127.20.3.4:2379,http://127.20.3.4:2379",
                "--listen-peer-urls=http://127.20.3.4:2380",
                "--listen-metrics-urls",
                "http://127.20.3.4:2381",
                "--advertise-client-urls=http://demo-0.demo.team-a.svc:2379",
                "--initial-cluster-token=$(literal)-$(UNDEFINED)",
            ]
        );
        let env: BTreeMap<_, _> = plan.env.into_iter().collect();
        assert_eq!(env["POD_IP"], "127.20.3.4");
        assert_eq!(env["ETCD_WAL_DIR"], "/k/pvc/data/wal");
        assert_eq!(env["GREETING"], "demo-0 at 127.20.3.4");
    }

    #[test]
    fn an_image_naming_a_release_this_machine_lacks_fails_as_a_pull_would() {
        let mut pod = member_pod();
        pod.spec.as_mut().unwrap().containers[0].image = Some("quay.io/coreos/etcd:v3.6.99".into());
        let c = etcd_container(&pod).unwrap();
        let err = plan(
            &pod,
            c,
            Ipv4Addr::LOCALHOST,
            Ipv4Addr::LOCALHOST,
            &[],
            &bins(),
            &[],
        )
        .unwrap_err();
        let LaunchError::ImagePull { message, .. } = &err else {
            panic!("{err:?}");
        };
        assert!(
            message.contains("etcd 3.6.99 is not built here"),
            "{message}"
        );

        // A program named etcd in an image that is not etcd's runs the default.
        let mut pod = member_pod();
        pod.spec.as_mut().unwrap().containers[0].image = Some("example.com/x/y:1".into());
        let c = etcd_container(&pod).unwrap();
        let p = plan(
            &pod,
            c,
            Ipv4Addr::LOCALHOST,
            Ipv4Addr::LOCALHOST,
            &[],
            &bins(),
            &[],
        )
        .unwrap();
        assert_eq!(p.program, PathBuf::from("/opt/etcd/etcd"));
    }

    #[test]
    fn a_shell_wrapper_is_refused_with_the_program_named() {
        let mut pod = member_pod();
        let c = &mut pod.spec.as_mut().unwrap().containers[0];
        c.command = Some(vec!["/bin/sh".into(), "-c".into(), "exec etcd".into()]);
        let c = etcd_container(&pod).unwrap();
        let err = plan(
            &pod,
            c,
            Ipv4Addr::LOCALHOST,
            Ipv4Addr::LOCALHOST,
            &[],
            &bins(),
            &[],
        )
        .unwrap_err();
        assert_eq!(
            err,
            LaunchError::NotEtcd {
                container: "etcd".into(),
                program: "sh".into()
            }
        );
    }

    #[test]
    fn a_secret_env_var_is_refused_by_name() {
        let mut pod = member_pod();
        let c = &mut pod.spec.as_mut().unwrap().containers[0];
        c.env.as_mut().unwrap().push(
            serde_json::from_value(
                json!({"name": "PASS", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}),
            )
            .unwrap(),
        );
        let c = etcd_container(&pod).unwrap();
        let err = plan(
            &pod,
            c,
            Ipv4Addr::LOCALHOST,
            Ipv4Addr::LOCALHOST,
            &[],
            &bins(),
            &[],
        )
        .unwrap_err();
        assert!(err.to_string().contains("env PASS: secretKeyRef"), "{err}");
    }

    #[test]
    fn a_local_image_runs_its_program_with_its_volumes_mounted_where_it_expects_them() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "op-1", "namespace": "system"},
            "spec": {"containers": [{
                "name": "operator", "image": "registry.example/etcd-steward:0.1.0",
                "args": ["run", "--leader-elect", "--name=$(POD_NAME)"],
                "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
            }]}
        }))
        .unwrap();
        let images = [LocalImage {
            repository: "etcd-steward".into(),
            program: "/build/etcd-steward".into(),
        }];
        assert!(etcd_container(&pod).is_none());
        let c = runnable_container(&pod, &images).expect("the mapped image is runnable");
        let mounts = [("/tmp".to_string(), PathBuf::from("/k/pods/op/volumes/tmp"))];
        let plan = plan(
            &pod,
            c,
            Ipv4Addr::LOCALHOST,
            Ipv4Addr::LOCALHOST,
            &mounts,
            &bins(),
            &images,
        )
        .unwrap();
        assert_eq!(plan.program, PathBuf::from("/build/etcd-steward"));
        assert_eq!(plan.args, ["run", "--leader-elect", "--name=op-1"]);
        assert_eq!(
            plan.binds,
            [(PathBuf::from("/k/pods/op/volumes/tmp"), "/tmp".to_string())]
        );
        assert!(
            runnable_container(&pod, &[]).is_none(),
            "unmapped images are not run"
        );

        let mut with_command = pod.clone();
        with_command.spec.as_mut().unwrap().containers[0].command = Some(vec!["/bin/sh".into()]);
        let c = runnable_container(&with_command, &images).unwrap();
        let err = super::plan(
            &with_command,
            c,
            Ipv4Addr::LOCALHOST,
            Ipv4Addr::LOCALHOST,
            &[],
            &bins(),
            &images,
        )
        .unwrap_err();
        assert!(matches!(err, LaunchError::NotEntrypoint { .. }), "{err}");
    }

    #[test]
    fn only_etcd_containers_are_claimed() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "web"},
            "spec": {"containers": [{"name": "nginx", "image": "nginx:1.27", "command": ["nginx"]}]}
        }))
        .unwrap();
        assert!(etcd_container(&pod).is_none());
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "db"},
            "spec": {"containers": [
                {"name": "side", "image": "busybox"},
                {"name": "member", "image": "example.com/x/y", "command": ["/usr/local/bin/etcd"]}
            ]}
        }))
        .unwrap();
        assert_eq!(etcd_container(&pod).unwrap().name, "member");
        assert_eq!(image_name("quay.io/coreos/etcd:v3.5.1@sha256:abc"), "etcd");
    }
}
