//! Turning a Pod's container into a local process invocation.
//!
//! The container's command and args are used as written, translated only
//! where a process on this machine needs it: the program becomes the local
//! etcd release's `etcd`, `etcdctl` or `etcdutl`, `$(VAR)` references
//! expand from the container env, wildcard and loopback hosts in
//! `--listen-*` URLs become the Pod's own IP, and volumeMount paths become
//! the directories that back them.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{Container, EnvVar, Pod};

use crate::etcd_bin::{EtcdBinaries, EtcdReleases};

use super::images::{PulledImage, RegistryAccess};

/// Why a container cannot be started; becomes the container's waiting
/// reason `CreateContainerConfigError` with this message.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum LaunchError {
    #[error("container {container}: env {var}: {what} is not supported by the local kubelet")]
    UnsupportedEnv {
        container: String,
        var: String,
        what: String,
    },
    /// A Secret or ConfigMap the env names is missing (or lacks the key),
    /// or could not be read: `CreateContainerConfigError` with the
    /// kubelet's own message (`secrets "NAME" not found`, `couldn't find
    /// key KEY in Secret NS/NAME`), retried until it is there.
    #[error("{message}")]
    EnvSource { container: String, message: String },
    #[error(
        "container {container}: the local kubelet runs image {image} only with its entrypoint (no command)"
    )]
    NotEntrypoint { container: String, image: String },
    /// The release the image tag names is not on this machine: the
    /// container's waiting reason is `ErrImagePull`, as for a failed pull.
    #[error("container {container}: {message}")]
    ImagePull { container: String, message: String },
    /// The program is not in the image (pulled, or an etcd image, which
    /// holds only etcd, etcdctl and etcdutl): a start error, as a runtime
    /// reports it (`RunContainerError`, or `StartError` once nothing
    /// restarts it).
    #[error("container {container}: {message}")]
    Exec { container: String, message: String },
    /// The image and securityContext give no runnable user (a user name,
    /// or root under runAsNonRoot): `CreateContainerConfigError`.
    #[error("container {container}: {message}")]
    User { container: String, message: String },
}

/// Where the Pod runs and what its env may read: the values `fieldRef`,
/// `secretKeyRef`, `configMapKeyRef` and `envFrom` resolve against.
#[derive(Debug, Clone, Copy)]
pub struct PodEnv<'a> {
    pub ip: Ipv4Addr,
    pub host_ip: Ipv4Addr,
    pub sources: &'a EnvSources,
}

/// The Secrets and ConfigMaps a Pod's containers take env from, as the
/// kubelet read them before starting a container: by name, the data
/// (`None`: the object does not exist), or why it could not be read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EnvSources {
    pub secrets: BTreeMap<String, SourceRead>,
    pub config_maps: BTreeMap<String, SourceRead>,
}

/// One Secret's or ConfigMap's data by key, `None` when it does not exist,
/// or why it could not be read.
pub type SourceRead = Result<Option<BTreeMap<String, Vec<u8>>>, String>;

impl EnvSources {
    /// The names of the Secrets and of the ConfigMaps `containers` take env
    /// from (`valueFrom.secretKeyRef`/`configMapKeyRef`, `envFrom`).
    pub fn wanted<'a>(
        containers: impl IntoIterator<Item = &'a Container>,
    ) -> (BTreeSet<String>, BTreeSet<String>) {
        let mut secrets = BTreeSet::new();
        let mut config_maps = BTreeSet::new();
        for c in containers {
            for from in c.env.iter().flatten().filter_map(|e| e.value_from.as_ref()) {
                if let Some(s) = &from.secret_key_ref {
                    secrets.insert(s.name.clone());
                }
                if let Some(m) = &from.config_map_key_ref {
                    config_maps.insert(m.name.clone());
                }
            }
            for from in c.env_from.iter().flatten() {
                if let Some(s) = &from.secret_ref {
                    secrets.insert(s.name.clone());
                }
                if let Some(m) = &from.config_map_ref {
                    config_maps.insert(m.name.clone());
                }
            }
        }
        (secrets, config_maps)
    }
}

/// Where a source's data comes from, for the kubelet's messages.
#[derive(Clone, Copy)]
enum SourceKind {
    Secret,
    ConfigMap,
}

impl SourceKind {
    /// As in the kubelet's "couldn't find key K in Secret NS/NAME".
    fn kind(self) -> &'static str {
        match self {
            SourceKind::Secret => "Secret",
            SourceKind::ConfigMap => "ConfigMap",
        }
    }

    /// As in the API's NotFound message: `secrets "NAME" not found`.
    fn resource(self) -> &'static str {
        match self {
            SourceKind::Secret => "secrets",
            SourceKind::ConfigMap => "configmaps",
        }
    }
}

impl EnvSources {
    /// The whole object: `Ok(None)` when it is absent and optional.
    fn object(
        &self,
        kind: SourceKind,
        name: &str,
        optional: bool,
    ) -> Result<Option<&BTreeMap<String, Vec<u8>>>, String> {
        let map = match kind {
            SourceKind::Secret => &self.secrets,
            SourceKind::ConfigMap => &self.config_maps,
        };
        match map.get(name) {
            None => Err(format!(
                "{} {name:?} was not read by the local kubelet",
                kind.resource()
            )),
            Some(Err(e)) => Err(e.clone()),
            Some(Ok(None)) if optional => Ok(None),
            Some(Ok(None)) => Err(format!("{} {name:?} not found", kind.resource())),
            Some(Ok(Some(data))) => Ok(Some(data)),
        }
    }

    /// One key's value: `Ok(None)` when it (or its object) is absent and
    /// optional, so the variable is left unset, as the kubelet does.
    fn key(
        &self,
        kind: SourceKind,
        ns: &str,
        name: &str,
        key: &str,
        optional: bool,
    ) -> Result<Option<String>, String> {
        let Some(data) = self.object(kind, name, optional)? else {
            return Ok(None);
        };
        match data.get(key) {
            Some(v) => Ok(Some(String::from_utf8_lossy(v).into_owned())),
            None if optional => Ok(None),
            None => Err(format!(
                "couldn't find key {key} in {} {ns}/{name}",
                kind.kind()
            )),
        }
    }
}

/// Everything needed to spawn the container's process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchPlan {
    /// The executable on this machine (for a pulled image, inside its rootfs).
    pub program: PathBuf,
    /// `argv[0]`: the program as the container names it.
    pub arg0: String,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    /// (local directory, mountPath) pairs bind-mounted in the process's own
    /// mount namespace. Empty for etcd, whose paths are rewritten instead.
    pub binds: Vec<(PathBuf, String)>,
    /// The etcd release the container's image names: its `etcdctl` and
    /// `etcdutl` serve exec probes, as the image's own would. None for a
    /// local image.
    pub release: Option<EtcdBinaries>,
    /// The working directory; `None`: the Pod's directory.
    pub working_dir: Option<PathBuf>,
    /// The user to run as (a pulled image's `User`, or the securityContext's);
    /// `None`: as the kubelet.
    pub run_as: Option<RunAs>,
    /// A pulled image's `imageID` (`host/repo@sha256:…`).
    pub image_id: Option<String>,
}

/// The credentials a container's process gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunAs {
    pub uid: u32,
    pub gid: u32,
    /// Supplementary groups: the Pod's `supplementalGroups` and `fsGroup`.
    pub groups: Vec<u32>,
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
/// program is etcd, whose image is one of `images`, or whose image is in one
/// of the `registries` the kubelet pulls from.
pub fn runnable_container<'a>(
    pod: &'a Pod,
    images: &[LocalImage],
    registries: &[RegistryAccess],
) -> Option<&'a Container> {
    pod.spec
        .as_ref()?
        .containers
        .iter()
        .find(|c| runs(c, images, registries))
}

/// Whether the kubelet can run `c` at all: its image or program is etcd,
/// its image is one of `images`, or it is pulled from one of `registries`.
pub fn runs(c: &Container, images: &[LocalImage], registries: &[RegistryAccess]) -> bool {
    is_etcd(c) || local_image(c, images).is_some() || pulled_image(c, images, registries)
}

/// Why the kubelet cannot run `c`'s image: what a node that cannot pull it
/// reports (`ErrImagePull`).
pub fn unrunnable(c: &Container) -> LaunchError {
    LaunchError::ImagePull {
        container: c.name.clone(),
        message: format!(
            "failed to pull image {:?}: the local kubelet runs etcd images (repository etcd), images mapped to local programs (KubeletConfig::images) and images of the registries it pulls from (KubeletConfig::registries), and this is none of them",
            c.image.as_deref().unwrap_or_default()
        ),
    }
}

/// Whether the kubelet pulls `c`'s image: it names one of `registries`, and
/// it is neither etcd (which runs a local release) nor a mapped local image.
pub fn pulled_image(c: &Container, images: &[LocalImage], registries: &[RegistryAccess]) -> bool {
    !is_etcd(c)
        && local_image(c, images).is_none()
        && c.image
            .as_deref()
            .is_some_and(|i| super::images::access_for(registries, i).is_some())
}

/// The container of `pod` that is etcd, if any.
pub fn etcd_container(pod: &Pod) -> Option<&Container> {
    pod.spec.as_ref()?.containers.iter().find(|c| is_etcd(c))
}

fn local_image<'a>(c: &Container, images: &'a [LocalImage]) -> Option<&'a LocalImage> {
    let name = image_name(c.image.as_deref()?);
    images.iter().find(|i| i.repository == name)
}

/// An etcd container: its image is etcd's (whatever program of the release
/// its command names), or its program is `etcd` in some other image.
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

/// Plans the process for `container` of `pod`, running at `at.ip`, with
/// each volumeMount path backed by the local directory in `mounts`. In an
/// etcd image the program is the release's `etcd`, `etcdctl` or `etcdutl`,
/// by the basename of `command[0]` (no command: etcd, the image's
/// entrypoint); any other program is not in the image.
pub fn plan(
    pod: &Pod,
    container: &Container,
    at: &PodEnv<'_>,
    mounts: &[(String, PathBuf)],
    releases: &EtcdReleases,
    images: &[LocalImage],
) -> Result<LaunchPlan, LaunchError> {
    let ip = at.ip;
    let env = container_env(pod, container, at)?;
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
            arg0: image.program.display().to_string(),
            program: image.program.clone(),
            args,
            env,
            binds,
            release: None,
            working_dir: None,
            run_as: None,
            image_id: None,
        });
    }

    let bins = release_for(container, releases)?;

    let mut words: Vec<String> = container.command.clone().unwrap_or_default();
    let program = if words.is_empty() {
        // No command: the image's entrypoint, which for an etcd image is etcd.
        bins.etcd.clone()
    } else {
        let first = expand(&words.remove(0), &vars);
        match basename(&first) {
            "etcd" => bins.etcd.clone(),
            "etcdctl" => bins.etcdctl.clone(),
            "etcdutl" => bins.etcdutl.clone(),
            _ => return Err(not_in_etcd_image(container, &first)),
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
        arg0: program.display().to_string(),
        program,
        args,
        env,
        binds: Vec::new(),
        release: Some(bins),
        working_dir: None,
        run_as: None,
        image_id: None,
    })
}

/// A program an etcd image does not hold, as a runtime reports it.
fn not_in_etcd_image(container: &Container, program: &str) -> LaunchError {
    let image = container.image.as_deref().unwrap_or("etcd");
    let why = if program.contains('/') {
        format!("stat {program}: no such file or directory")
    } else {
        "executable file not found in $PATH".to_string()
    };
    LaunchError::Exec {
        container: container.name.clone(),
        message: format!(
            "exec: {program:?}: {why} (the local kubelet's etcd image {image} holds only etcd, etcdctl and etcdutl)"
        ),
    }
}

/// The `PATH` a runtime gives a container whose image sets none.
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Plans the process for `container`, whose image was pulled as `image`,
/// with Kubernetes' rules: `command` replaces the image's Entrypoint (and
/// drops its Cmd), `args` replaces Cmd; `$(VAR)` in command and args expands
/// from the container's env; the env is the image's Env, then the
/// container's (the container wins); the working directory is the
/// container's `workingDir` or the image's WorkingDir, inside the rootfs
/// (or at a volume, when it lies under a mountPath); the user is the image's
/// `User` unless the securityContext sets `runAsUser`/`runAsGroup`. The
/// program is `argv[0]` found inside the rootfs: a path as written (symlinks
/// resolved inside the rootfs), a bare name on the `PATH` of that env.
pub fn plan_pulled(
    pod: &Pod,
    container: &Container,
    at: &PodEnv<'_>,
    mounts: &[(String, PathBuf)],
    image: &PulledImage,
) -> Result<LaunchPlan, LaunchError> {
    let container_env = container_env(pod, container, at)?;
    let vars: BTreeMap<&str, &str> = container_env
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let expand_all =
        |words: &[String]| -> Vec<String> { words.iter().map(|w| expand(w, &vars)).collect() };
    let command = container.command.as_deref().unwrap_or_default();
    let args = container.args.as_deref().unwrap_or_default();
    let words: Vec<String> = if !command.is_empty() {
        let mut w = expand_all(command);
        w.extend(expand_all(args));
        w
    } else {
        let mut w = image.config.entrypoint.clone();
        if args.is_empty() {
            w.extend(image.config.cmd.iter().cloned());
        } else {
            w.extend(expand_all(args));
        }
        w
    };
    let exec_error = |message: String| LaunchError::Exec {
        container: container.name.clone(),
        message,
    };
    let Some((first, rest)) = words.split_first() else {
        return Err(exec_error(format!(
            "no command specified: image {} has no Entrypoint or Cmd and the container no command",
            image.reference
        )));
    };

    let mut env: Vec<(String, String)> = Vec::new();
    let image_env = image
        .config
        .env
        .iter()
        .map(|kv| kv.split_once('=').unwrap_or((kv.as_str(), "")))
        .map(|(k, v)| (k.to_owned(), v.to_owned()));
    for (k, v) in image_env.chain(container_env) {
        set_env(&mut env, k, v);
    }

    let workdir = container
        .working_dir
        .clone()
        .filter(|w| !w.is_empty())
        .or_else(|| Some(image.config.working_dir.clone()).filter(|w| !w.is_empty()));
    let working_dir = workdir
        .as_deref()
        .map(|w| in_container(w, mounts, &image.rootfs));

    let path = env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map_or(DEFAULT_PATH, |(_, v)| v.as_str());
    let program =
        find_program(&image.rootfs, first, path, workdir.as_deref()).ok_or_else(|| {
            exec_error(if first.contains('/') {
                format!(
                    "exec: {first:?}: stat {first}: no such file or directory in image {}",
                    image.reference
                )
            } else {
                format!(
                    "exec: {first:?}: executable file not found in $PATH ({path}) of image {}",
                    image.reference
                )
            })
        })?;
    let run_as = run_as(pod, container, &image.config.user)?;
    let binds = mounts
        .iter()
        .map(|(path, local)| (local.clone(), path.clone()))
        .collect();
    Ok(LaunchPlan {
        program,
        arg0: first.clone(),
        args: rest.to_vec(),
        env,
        binds,
        release: None,
        working_dir,
        run_as,
        image_id: Some(image.image_id.clone()),
    })
}

/// Sets `key` in an ordered env list; a later value replaces an earlier one
/// in place.
pub(crate) fn set_env(env: &mut Vec<(String, String)>, key: String, value: String) {
    match env.iter_mut().find(|(k, _)| *k == key) {
        Some(slot) => slot.1 = value,
        None => env.push((key, value)),
    }
}

/// Where the in-container path `path` is for the process: at a volume's
/// mountPath (bind-mounted there in its mount namespace), else in the rootfs.
fn in_container(path: &str, mounts: &[(String, PathBuf)], rootfs: &Path) -> PathBuf {
    // `..` is resolved first, lexically, as inside the container: a
    // `/data/../etc` must not pass for a path under the volume at /data.
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            p => parts.push(p),
        }
    }
    let normal = format!("/{}", parts.join("/"));
    let path = normal.as_str();
    let under_volume = mounts.iter().any(|(mount, _)| {
        let mount = mount.trim_end_matches('/');
        path.strip_prefix(mount)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
    });
    if under_volume {
        PathBuf::from(path)
    } else {
        resolve_in_root(rootfs, path)
    }
}

/// The executable `name` stands for inside `rootfs`.
fn find_program(rootfs: &Path, name: &str, path: &str, workdir: Option<&str>) -> Option<PathBuf> {
    let executable = |p: &Path| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if name.contains('/') {
        let full = if name.starts_with('/') {
            name.to_owned()
        } else {
            format!("{}/{name}", workdir.unwrap_or("/"))
        };
        let p = resolve_in_root(rootfs, &full);
        return executable(&p).then_some(p);
    }
    path.split(':')
        .filter(|d| d.starts_with('/'))
        .map(|d| resolve_in_root(rootfs, &format!("{d}/{name}")))
        .find(|p| executable(p))
}

/// `path` as seen from inside `rootfs`: `..` stops at the root and symlinks
/// are followed inside it (an absolute target starts again at `rootfs`).
pub fn resolve_in_root(rootfs: &Path, path: &str) -> PathBuf {
    let mut pending: std::collections::VecDeque<String> =
        path.split('/').map(str::to_owned).collect();
    let mut resolved: Vec<String> = Vec::new();
    let mut links = 0;
    while let Some(part) = pending.pop_front() {
        match part.as_str() {
            "" | "." => continue,
            ".." => {
                resolved.pop();
                continue;
            }
            _ => {}
        }
        resolved.push(part);
        let here: PathBuf = resolved.iter().fold(rootfs.to_path_buf(), |p, c| p.join(c));
        let Ok(target) = std::fs::read_link(&here) else {
            continue;
        };
        links += 1;
        if links > 40 {
            break;
        }
        resolved.pop();
        let target = target.to_string_lossy().into_owned();
        if target.starts_with('/') {
            resolved.clear();
        }
        for (i, t) in target.split('/').enumerate() {
            pending.insert(i, t.to_owned());
        }
    }
    resolved.iter().fold(rootfs.to_path_buf(), |p, c| p.join(c))
}

/// The user the process runs as: the securityContext's runAsUser/runAsGroup
/// (container over Pod), else the image's numeric `User` (`uid[:gid]`).
fn run_as(pod: &Pod, c: &Container, image_user: &str) -> Result<Option<RunAs>, LaunchError> {
    let psc = pod.spec.as_ref().and_then(|s| s.security_context.as_ref());
    let csc = c.security_context.as_ref();
    let user_error = |message: String| LaunchError::User {
        container: c.name.clone(),
        message,
    };
    let (image_uid, image_gid) = match image_user.split_once(':') {
        _ if image_user.is_empty() => (None, None),
        Some((u, g)) => (Some(u), Some(g)),
        None => (Some(image_user), None),
    };
    let numeric = |what: &str, v: &str| -> Result<i64, LaunchError> {
        v.parse::<u32>().map(i64::from).map_err(|_| {
            user_error(format!(
                "image user {image_user:?}: {what} {v:?} is not numeric; the local kubelet reads no /etc/passwd in images (set runAsUser/runAsGroup)"
            ))
        })
    };
    let uid = match csc
        .and_then(|s| s.run_as_user)
        .or(psc.and_then(|s| s.run_as_user))
    {
        Some(u) => Some(u),
        None => image_uid.map(|u| numeric("user", u)).transpose()?,
    };
    let gid = match csc
        .and_then(|s| s.run_as_group)
        .or(psc.and_then(|s| s.run_as_group))
    {
        Some(g) => Some(g),
        None => image_gid.map(|g| numeric("group", g)).transpose()?,
    };
    let non_root = csc
        .and_then(|s| s.run_as_non_root)
        .or(psc.and_then(|s| s.run_as_non_root))
        == Some(true);
    if non_root && uid.unwrap_or(0) == 0 {
        return Err(user_error(
            "container has runAsNonRoot and image will run as root".into(),
        ));
    }
    if uid.is_none() && gid.is_none() {
        return Ok(None);
    }
    let id = |v: i64| u32::try_from(v).map_err(|_| user_error(format!("id {v} is out of range")));
    let mut groups = Vec::new();
    for g in psc
        .and_then(|s| s.supplemental_groups.clone())
        .unwrap_or_default()
        .into_iter()
        .chain(psc.and_then(|s| s.fs_group))
    {
        let g = id(g)?;
        if !groups.contains(&g) {
            groups.push(g);
        }
    }
    Ok(Some(RunAs {
        uid: id(uid.unwrap_or(0))?,
        gid: id(gid.unwrap_or(0))?,
        groups,
    }))
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

/// The container's environment, in order: `envFrom` sources first (a later
/// one wins), then `env`, whose entries win and whose `value`s expand
/// against the variables defined before them. `valueFrom` resolves
/// fieldRefs and Secret/ConfigMap keys, as the kubelet does at a start.
fn container_env(
    pod: &Pod,
    container: &Container,
    at: &PodEnv<'_>,
) -> Result<Vec<(String, String)>, LaunchError> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    let source_error = |message: String| LaunchError::EnvSource {
        container: container.name.clone(),
        message,
    };
    let mut env: Vec<(String, String)> = Vec::new();
    for from in container.env_from.iter().flatten() {
        let (kind, name, optional) = match (&from.secret_ref, &from.config_map_ref) {
            (Some(s), _) => (SourceKind::Secret, &s.name, s.optional == Some(true)),
            (None, Some(c)) => (SourceKind::ConfigMap, &c.name, c.optional == Some(true)),
            (None, None) => continue,
        };
        let Some(data) = at
            .sources
            .object(kind, name, optional)
            .map_err(source_error)?
        else {
            continue;
        };
        let prefix = from.prefix.as_deref().unwrap_or_default();
        for (key, value) in data {
            let var = format!("{prefix}{key}");
            // The kubelet skips (with an event) keys that are no valid
            // variable name.
            if var.is_empty() || var.contains('=') {
                continue;
            }
            set_env(&mut env, var, String::from_utf8_lossy(value).into_owned());
        }
    }
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
            (None, Some(from)) => {
                let keyed = match (&from.secret_key_ref, &from.config_map_key_ref) {
                    (Some(s), _) => Some((SourceKind::Secret, &s.name, &s.key, s.optional)),
                    (None, Some(c)) => Some((SourceKind::ConfigMap, &c.name, &c.key, c.optional)),
                    (None, None) => None,
                };
                match (&from.field_ref, keyed) {
                    (Some(f), _) => field(pod, &f.field_path, at.ip, at.host_ip)
                        .ok_or_else(|| unsupported(&format!("fieldRef {}", f.field_path)))?,
                    (None, Some((kind, source, key, optional))) => {
                        match at
                            .sources
                            .key(kind, ns, source, key, optional == Some(true))
                            .map_err(source_error)?
                        {
                            Some(v) => v,
                            // Optional and absent: the variable is not set.
                            None => continue,
                        }
                    }
                    (None, None) if from.resource_field_ref.is_some() => {
                        return Err(unsupported("resourceFieldRef"));
                    }
                    (None, None) => return Err(unsupported("this valueFrom")),
                }
            }
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

    static NO_SOURCES: EnvSources = EnvSources {
        secrets: BTreeMap::new(),
        config_maps: BTreeMap::new(),
    };

    fn at(ip: Ipv4Addr) -> PodEnv<'static> {
        PodEnv {
            ip,
            host_ip: Ipv4Addr::LOCALHOST,
            sources: &NO_SOURCES,
        }
    }

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
            &at(ip),
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
        let err = plan(&pod, c, &at(Ipv4Addr::LOCALHOST), &[], &bins(), &[]).unwrap_err();
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
        let p = plan(&pod, c, &at(Ipv4Addr::LOCALHOST), &[], &bins(), &[]).unwrap();
        assert_eq!(p.program, PathBuf::from("/opt/etcd/etcd"));
    }

    #[test]
    fn an_etcd_image_runs_the_program_its_command_names_and_nothing_else() {
        let restore = |command: &[&str]| {
            let mut pod = member_pod();
            let c = &mut pod.spec.as_mut().unwrap().containers[0];
            c.name = "restore".into();
            c.command = Some(command.iter().map(|w| w.to_string()).collect());
            c.args = Some(vec![
                "snapshot".into(),
                "restore".into(),
                "/var/lib/etcd/restore.db".into(),
                "--data-dir".into(),
                "/var/lib/etcd/data".into(),
            ]);
            pod
        };
        let mounts = [("/var/lib/etcd".to_string(), PathBuf::from("/k/pvc/data"))];
        for (command, program) in [
            (&["etcdutl"][..], "/opt/etcd-3.5.21/etcdutl"),
            (&["/usr/local/bin/etcdutl"], "/opt/etcd-3.5.21/etcdutl"),
            (&["etcdctl"], "/opt/etcd-3.5.21/etcdctl"),
            (&["/usr/local/bin/etcd"], "/opt/etcd-3.5.21/etcd"),
        ] {
            let pod = restore(command);
            let c = &pod.spec.as_ref().unwrap().containers[0];
            let p = plan(&pod, c, &at(Ipv4Addr::LOCALHOST), &mounts, &bins(), &[]).unwrap();
            assert_eq!(p.program, PathBuf::from(program), "{command:?}");
            assert_eq!(
                p.args,
                [
                    "snapshot",
                    "restore",
                    "/k/pvc/data/restore.db",
                    "--data-dir",
                    "/k/pvc/data/data"
                ],
                "paths under the volume become its directory"
            );
        }

        // Not in the image: a start error, as a runtime reports it.
        let pod = restore(&["/bin/sh", "-c", "exec etcd"]);
        let c = &pod.spec.as_ref().unwrap().containers[0];
        let err = plan(&pod, c, &at(Ipv4Addr::LOCALHOST), &[], &bins(), &[]).unwrap_err();
        let LaunchError::Exec { container, message } = &err else {
            panic!("{err:?}");
        };
        assert_eq!(container, "restore");
        assert!(
            message.contains("exec: \"/bin/sh\": stat /bin/sh: no such file or directory")
                && message.contains("registry.k8s.io/etcd:3.5.21-0"),
            "{message}"
        );
        let pod = restore(&["etcdadm"]);
        let c = &pod.spec.as_ref().unwrap().containers[0];
        let err = plan(&pod, c, &at(Ipv4Addr::LOCALHOST), &[], &bins(), &[]).unwrap_err();
        assert!(
            err.to_string()
                .contains("exec: \"etcdadm\": executable file not found in $PATH"),
            "{err}"
        );
    }

    fn with_env(env: serde_json::Value, env_from: serde_json::Value) -> Pod {
        let mut pod = member_pod();
        let c = &mut pod.spec.as_mut().unwrap().containers[0];
        c.env = serde_json::from_value(env).unwrap();
        c.env_from = serde_json::from_value(env_from).unwrap();
        pod
    }

    fn env_of(pod: &Pod, sources: &EnvSources) -> Result<Vec<(String, String)>, LaunchError> {
        let at = PodEnv {
            ip: Ipv4Addr::LOCALHOST,
            host_ip: Ipv4Addr::LOCALHOST,
            sources,
        };
        container_env(pod, &pod.spec.as_ref().unwrap().containers[0], &at)
    }

    fn data(pairs: &[(&str, &str)]) -> SourceRead {
        Ok(Some(
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.as_bytes().to_vec()))
                .collect(),
        ))
    }

    #[test]
    fn env_from_secrets_and_config_maps_as_the_kubelet_resolves_it() {
        let pod = with_env(
            json!([
                {"name": "KEY", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "access-key"}}},
                {"name": "REGION", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "region"}}},
                {"name": "URL", "value": "s3://$(BUCKET)/$(REGION)"},
                {"name": "MAYBE", "valueFrom": {"secretKeyRef": {"name": "gone", "key": "k", "optional": true}}},
                {"name": "NOKEY", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "nope", "optional": true}}},
            ]),
            json!([
                {"configMapRef": {"name": "cfg"}, "prefix": "CFG_"},
                {"secretRef": {"name": "gone", "optional": true}},
                {"secretRef": {"name": "creds"}},
            ]),
        );
        assert_eq!(
            EnvSources::wanted(&pod.spec.as_ref().unwrap().containers),
            (
                ["creds", "gone"].map(String::from).into(),
                ["cfg"].map(String::from).into()
            )
        );
        let mut sources = EnvSources::default();
        sources.secrets.insert(
            "creds".into(),
            data(&[("access-key", "AK"), ("BUCKET", "b1")]),
        );
        sources.secrets.insert("gone".into(), Ok(None));
        sources
            .config_maps
            .insert("cfg".into(), data(&[("region", "eu")]));
        let env: BTreeMap<_, _> = env_of(&pod, &sources).unwrap().into_iter().collect();
        assert_eq!(env["KEY"], "AK");
        assert_eq!(env["REGION"], "eu");
        assert_eq!(env["CFG_region"], "eu");
        assert_eq!(env["BUCKET"], "b1", "envFrom without a prefix");
        assert_eq!(env["URL"], "s3://b1/eu", "env expands envFrom's variables");
        assert!(
            !env.contains_key("MAYBE") && !env.contains_key("NOKEY"),
            "{env:?}"
        );

        // Missing and not optional: the kubelet's messages, retried.
        let mut missing = sources.clone();
        missing.secrets.insert("creds".into(), Ok(None));
        let err = env_of(&pod, &missing).unwrap_err();
        assert!(matches!(err, LaunchError::EnvSource { .. }), "{err:?}");
        assert_eq!(err.to_string(), "secrets \"creds\" not found");
        let pod = with_env(
            json!([{"name": "K", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "secret-key"}}}]),
            json!(null),
        );
        assert_eq!(
            env_of(&pod, &sources).unwrap_err().to_string(),
            "couldn't find key secret-key in Secret team-a/creds"
        );
        let mut unreadable = sources.clone();
        unreadable.secrets.insert(
            "creds".into(),
            Err("reading secret \"creds\": forbidden".into()),
        );
        assert!(
            env_of(&pod, &unreadable)
                .unwrap_err()
                .to_string()
                .contains("forbidden")
        );
        let pod = with_env(
            json!([{"name": "R", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}}]),
            json!(null),
        );
        assert!(
            env_of(&pod, &sources)
                .unwrap_err()
                .to_string()
                .contains("env R: resourceFieldRef is not supported"),
        );
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
        let c = runnable_container(&pod, &images, &[]).expect("the mapped image is runnable");
        let mounts = [("/tmp".to_string(), PathBuf::from("/k/pods/op/volumes/tmp"))];
        let plan = plan(&pod, c, &at(Ipv4Addr::LOCALHOST), &mounts, &bins(), &images).unwrap();
        assert_eq!(plan.program, PathBuf::from("/build/etcd-steward"));
        assert_eq!(plan.args, ["run", "--leader-elect", "--name=op-1"]);
        assert_eq!(
            plan.binds,
            [(PathBuf::from("/k/pods/op/volumes/tmp"), "/tmp".to_string())]
        );
        assert!(
            runnable_container(&pod, &[], &[]).is_none(),
            "unmapped images are not run"
        );

        let mut with_command = pod.clone();
        with_command.spec.as_mut().unwrap().containers[0].command = Some(vec!["/bin/sh".into()]);
        let c = runnable_container(&with_command, &images, &[]).unwrap();
        let err = super::plan(
            &with_command,
            c,
            &at(Ipv4Addr::LOCALHOST),
            &[],
            &bins(),
            &images,
        )
        .unwrap_err();
        assert!(matches!(err, LaunchError::NotEntrypoint { .. }), "{err}");
    }

    /// A rootfs with /bin/app, /usr/bin/tool (and /bin/tool -> ../usr/bin/tool),
    /// and a non-executable /etc/conf.
    fn rootfs() -> (tempfile::TempDir, PulledImage) {
        use std::os::unix::fs::PermissionsExt;
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("rootfs");
        for d in ["bin", "usr/bin", "etc", "srv"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        for f in ["bin/app", "usr/bin/tool"] {
            std::fs::write(root.join(f), "#!").unwrap();
            std::fs::set_permissions(root.join(f), std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        std::fs::write(root.join("etc/conf"), "").unwrap();
        std::os::unix::fs::symlink("../usr/bin/tool", root.join("bin/tool")).unwrap();
        std::os::unix::fs::symlink("/usr/bin/tool", root.join("bin/abs")).unwrap();
        let image = PulledImage {
            reference: "127.0.0.1:5000/app:v1".into(),
            image_id: "127.0.0.1:5000/app@sha256:aa".into(),
            manifest_digest: "sha256:aa".into(),
            rootfs: root,
            config: crate::kubelet::images::ImageConfig {
                entrypoint: vec!["/bin/app".into(), "--from-entrypoint".into()],
                cmd: vec!["serve".into(), "--from-cmd".into()],
                env: vec![
                    "PATH=/usr/bin:/bin".into(),
                    "MODE=image".into(),
                    "KEEP=1".into(),
                ],
                user: "1000:2000".into(),
                working_dir: "/srv".into(),
            },
        };
        (t, image)
    }

    fn app_pod(container: serde_json::Value) -> Pod {
        let mut c = json!({"name": "app", "image": "127.0.0.1:5000/app:v1"});
        c.as_object_mut()
            .unwrap()
            .extend(container.as_object().unwrap().clone());
        serde_json::from_value(json!({
            "metadata": {"name": "app-0", "namespace": "ns"},
            "spec": {"containers": [c]}
        }))
        .unwrap()
    }

    fn plan_for(pod: &Pod, image: &PulledImage) -> Result<LaunchPlan, LaunchError> {
        let mounts = [("/data".to_string(), PathBuf::from("/k/pods/x/volumes/data"))];
        plan_pulled(
            pod,
            &pod.spec.as_ref().unwrap().containers[0],
            &at("127.20.0.9".parse().unwrap()),
            &mounts,
            image,
        )
    }

    #[test]
    fn a_pulled_image_runs_its_entrypoint_and_cmd_unless_the_container_overrides_them() {
        let (_t, image) = rootfs();
        let root = image.rootfs.clone();

        // Neither: Entrypoint + Cmd.
        let p = plan_for(&app_pod(json!({})), &image).unwrap();
        assert_eq!(p.program, root.join("bin/app"));
        assert_eq!(p.arg0, "/bin/app");
        assert_eq!(p.args, ["--from-entrypoint", "serve", "--from-cmd"]);
        assert_eq!(p.image_id.as_deref(), Some("127.0.0.1:5000/app@sha256:aa"));
        assert_eq!(
            p.working_dir,
            Some(root.join("srv")),
            "WorkingDir inside the rootfs"
        );
        assert_eq!(
            p.binds,
            [(PathBuf::from("/k/pods/x/volumes/data"), "/data".to_string())]
        );

        // args only: Entrypoint + args ($(VAR) expanded from the container env).
        let pod = app_pod(json!({
            "args": ["run", "--name=$(POD_NAME)"],
            "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
        }));
        let p = plan_for(&pod, &image).unwrap();
        assert_eq!(p.arg0, "/bin/app");
        assert_eq!(p.args, ["--from-entrypoint", "run", "--name=app-0"]);

        // command only: Entrypoint and Cmd both dropped; a bare name is found
        // on the image's PATH, through a symlink, inside the rootfs.
        let p = plan_for(&app_pod(json!({"command": ["tool", "-v"]})), &image).unwrap();
        assert_eq!(p.program, root.join("usr/bin/tool"));
        assert_eq!(p.arg0, "tool");
        assert_eq!(p.args, ["-v"]);

        // command and args; an absolute symlink stays inside the rootfs.
        let pod = app_pod(json!({"command": ["/bin/abs"], "args": ["x"]}));
        let p = plan_for(&pod, &image).unwrap();
        assert_eq!(p.program, root.join("usr/bin/tool"));
        assert_eq!(p.args, ["x"]);

        // Not in the image: a start error naming the program and the image.
        let err = plan_for(&app_pod(json!({"command": ["nope"]})), &image).unwrap_err();
        assert!(
            matches!(&err, LaunchError::Exec { message, .. }
                if message.contains("\"nope\": executable file not found in $PATH")
                    && message.contains("127.0.0.1:5000/app:v1")),
            "{err}"
        );
        let err = plan_for(&app_pod(json!({"command": ["/etc/conf"]})), &image).unwrap_err();
        assert!(
            matches!(err, LaunchError::Exec { .. }),
            "not executable: {err}"
        );

        // No entrypoint, no cmd, no command.
        let mut bare = image.clone();
        bare.config.entrypoint.clear();
        bare.config.cmd.clear();
        let err = plan_for(&app_pod(json!({})), &bare).unwrap_err();
        assert!(err.to_string().contains("no command specified"), "{err}");
    }

    #[test]
    fn a_pulled_image_env_comes_first_and_the_container_env_wins() {
        let (_t, image) = rootfs();
        let pod = app_pod(json!({"env": [
            {"name": "MODE", "value": "pod"},
            {"name": "PATH", "value": "/bin"},
            {"name": "EXTRA", "value": "$(MODE)-x"},
        ]}));
        let p = plan_for(&pod, &image).unwrap();
        assert_eq!(
            p.env,
            [
                ("PATH".to_string(), "/bin".to_string()),
                ("MODE".into(), "pod".into()),
                ("KEEP".into(), "1".into()),
                ("EXTRA".into(), "pod-x".into()),
            ]
        );
        // The container's PATH is the one searched: tool is not in /bin itself,
        // but /bin/tool is a symlink to it.
        let pod =
            app_pod(json!({"command": ["tool"], "env": [{"name": "PATH", "value": "/nowhere"}]}));
        assert!(matches!(
            plan_for(&pod, &image),
            Err(LaunchError::Exec { .. })
        ));
    }

    #[test]
    fn a_pulled_image_runs_as_its_user_unless_the_security_context_says_otherwise() {
        let (_t, image) = rootfs();
        let p = plan_for(&app_pod(json!({})), &image).unwrap();
        assert_eq!(
            p.run_as,
            Some(RunAs {
                uid: 1000,
                gid: 2000,
                groups: vec![]
            }),
            "the image's User"
        );

        let mut pod = app_pod(json!({"securityContext": {"runAsUser": 3000}}));
        pod.spec.as_mut().unwrap().security_context = serde_json::from_value(json!({
            "runAsUser": 4000, "runAsGroup": 4001, "supplementalGroups": [5, 6], "fsGroup": 7
        }))
        .unwrap();
        let p = plan_for(&pod, &image).unwrap();
        assert_eq!(
            p.run_as,
            Some(RunAs {
                uid: 3000,
                gid: 4001,
                groups: vec![5, 6, 7]
            }),
            "container over Pod over image"
        );

        let mut root_image = image.clone();
        root_image.config.user = String::new();
        assert_eq!(
            plan_for(&app_pod(json!({})), &root_image).unwrap().run_as,
            None
        );
        let err = plan_for(
            &app_pod(json!({"securityContext": {"runAsNonRoot": true}})),
            &root_image,
        )
        .unwrap_err();
        assert!(matches!(err, LaunchError::User { .. }), "{err}");
        assert!(err.to_string().contains("runAsNonRoot"), "{err}");

        let mut named = image.clone();
        named.config.user = "nobody".into();
        let err = plan_for(&app_pod(json!({})), &named).unwrap_err();
        assert!(matches!(err, LaunchError::User { .. }), "{err}");
        let pod = app_pod(json!({"securityContext": {"runAsUser": 65534, "runAsGroup": 65534}}));
        assert_eq!(
            plan_for(&pod, &named).unwrap().run_as,
            Some(RunAs {
                uid: 65534,
                gid: 65534,
                groups: vec![]
            }),
            "runAsUser makes the image's user name irrelevant"
        );
    }

    #[test]
    fn a_working_dir_under_a_volume_is_the_volume() {
        let (_t, image) = rootfs();
        let p = plan_for(&app_pod(json!({"workingDir": "/data/sub"})), &image).unwrap();
        assert_eq!(p.working_dir, Some(PathBuf::from("/data/sub")));
        let p = plan_for(&app_pod(json!({"workingDir": "/opt/../srv/x"})), &image).unwrap();
        assert_eq!(p.working_dir, Some(image.rootfs.join("srv/x")));
        let p = plan_for(&app_pod(json!({"workingDir": "/data/../etc"})), &image).unwrap();
        assert_eq!(
            p.working_dir,
            Some(image.rootfs.join("etc")),
            "`..` out of the volume is the rootfs's /etc, not the machine's"
        );
        assert_eq!(
            resolve_in_root(&image.rootfs, "/../../bin/tool"),
            image.rootfs.join("usr/bin/tool"),
            "no way out of the rootfs"
        );
    }

    #[test]
    fn images_of_listed_registries_are_runnable_and_etcd_stays_etcd() {
        let regs = [RegistryAccess {
            host: "127.0.0.1:5000".into(),
            ca_pem: None,
        }];
        let pod = app_pod(json!({}));
        assert!(runnable_container(&pod, &[], &[]).is_none());
        let c = runnable_container(&pod, &[], &regs).unwrap();
        assert!(pulled_image(c, &[], &regs));
        let etcd = app_pod(json!({"image": "127.0.0.1:5000/etcd:3.6.17"}));
        let c = runnable_container(&etcd, &[], &regs).unwrap();
        assert!(!pulled_image(c, &[], &regs), "etcd runs a local release");
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
