//! The SDKs' example policies, built as components by each SDK's own build
//! script (componentize-py, componentize-js) the way a policy author builds
//! them. Built once per content of the SDK and the WIT, into the cache.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use sha2::{Digest, Sha256};

/// policies/python's example, "at most N voters down".
pub fn python() -> Result<PathBuf> {
    build("python", "examples/voters-down")
}

/// policies/python/testdata/raises: a policy whose code raises.
pub fn python_raising() -> Result<PathBuf> {
    build("python", "testdata/raises")
}

/// policies/js's example, "database headroom".
pub fn js() -> Result<PathBuf> {
    build("js", "examples/db-headroom")
}

/// Builds `policies/<lang>/<dir>` with the SDK's build script.
fn build(lang: &str, dir: &str) -> Result<PathBuf> {
    let example = dir.replace('/', "-");
    let root = crate::repo::root();
    let sdk = root.join("policies").join(lang);
    let mut hasher = Sha256::new();
    for file in sources(&sdk)?
        .into_iter()
        .chain([root.join("wit/status-policy.wit")])
    {
        hasher.update(
            file.strip_prefix(&root)
                .unwrap_or(&file)
                .to_string_lossy()
                .as_bytes(),
        );
        hasher.update(std::fs::read(&file).with_context(|| format!("reading {}", file.display()))?);
    }
    let key = &hex::encode(hasher.finalize())[..16];
    let cache = std::env::var_os("ETCD_STEWARD_CACHE")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/etcd-steward")))
        .context("neither ETCD_STEWARD_CACHE nor HOME is set")?
        .join("sdk-examples");
    let out = cache.join(format!("{lang}-{example}-{key}.wasm"));
    if out.is_file() {
        return Ok(out);
    }
    std::fs::create_dir_all(&cache)?;
    let tmp = cache.join(format!(
        ".{lang}-{example}-{key}.{}.wasm",
        std::process::id()
    ));
    let script = sdk.join("build.sh");
    let status = Command::new(&script)
        .arg(&tmp)
        .arg(sdk.join(dir))
        .status()
        .with_context(|| format!("running {}", script.display()))?;
    if !status.success() {
        let _ = std::fs::remove_file(&tmp);
        bail!("{} failed ({status})", script.display());
    }
    std::fs::rename(&tmp, &out)?;
    Ok(out)
}

/// The SDK's files that go into a build, in a stable order: no tool caches.
fn sources(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in
            std::fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))?
        {
            let path = entry?.path();
            let name = path.file_name().unwrap_or_default().to_string_lossy();
            if ["node_modules", "__pycache__", ".venv"].contains(&name.as_ref()) {
                continue;
            }
            if path.is_dir() {
                stack.push(path);
            } else {
                out.push(path);
            }
        }
    }
    out.sort();
    Ok(out)
}
