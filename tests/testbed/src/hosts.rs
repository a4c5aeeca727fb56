//! Shared editing of a hosts file: each owner (one kubelet) keeps its lines
//! in its own marked block and never touches anything else.
//!
//! The file is rewritten in place, never replaced: it is bind-mounted over
//! `/etc/hosts`, and a file renamed over the mount point would not be seen
//! through the mount. Every intermediate state of a rewrite is a valid hosts
//! file, because a resolver may read it at any moment and Go caches what it
//! read for seconds.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::Read;
use std::net::IpAddr;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::{Context, Result};
use nix::fcntl::{Flock, FlockArg};

/// Serialises writers inside this process; `flock` serialises processes.
static WRITERS: Mutex<()> = Mutex::new(());
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// One owner's block of lines in a hosts file.
#[derive(Debug)]
pub struct HostsBlock {
    path: PathBuf,
    begin: String,
    end: String,
    /// key (e.g. a Pod's namespace/name) -> its address and names
    entries: Mutex<BTreeMap<String, (IpAddr, Vec<String>)>>,
}

impl HostsBlock {
    /// A block in `/etc/hosts`, allowed only inside the testbed's private mount
    /// namespace (see [`crate::namespace::ensure_private_hosts`]).
    pub fn etc_hosts() -> Result<Self> {
        crate::namespace::ensure_private_hosts()?;
        Self::at(Path::new("/etc/hosts"))
    }

    /// A block in an arbitrary file (which must exist). Use
    /// [`HostsBlock::etc_hosts`] for `/etc/hosts`; this does not check it.
    pub fn at(path: &Path) -> Result<Self> {
        let id = format!(
            "{}-{}",
            std::process::id(),
            NEXT_ID.fetch_add(1, Ordering::Relaxed)
        );
        let block = HostsBlock {
            path: path.to_path_buf(),
            begin: format!("# BEGIN steward-testbed kubelet {id}"),
            end: format!("# END steward-testbed kubelet {id}"),
            entries: Mutex::new(BTreeMap::new()),
        };
        block
            .write()
            .with_context(|| format!("preparing a block in {}", path.display()))?;
        Ok(block)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Maps `names` to `ip` under `key`, replacing what `key` had.
    pub fn set(&self, key: &str, ip: IpAddr, names: Vec<String>) -> Result<()> {
        self.entries
            .lock()
            .unwrap()
            .insert(key.to_string(), (ip, names));
        self.write()
    }

    /// Drops `key`'s names; a no-op when it has none.
    pub fn remove(&self, key: &str) -> Result<()> {
        if self.entries.lock().unwrap().remove(key).is_none() {
            return Ok(());
        }
        self.write()
    }

    /// Removes the whole block from the file.
    pub fn clear(&self) -> Result<()> {
        self.entries.lock().unwrap().clear();
        self.rewrite(|text| self.strip_block(text))
    }

    fn write(&self) -> Result<()> {
        let block = {
            let entries = self.entries.lock().unwrap();
            let mut block = format!("{}\n", self.begin);
            for (ip, names) in entries.values() {
                if !names.is_empty() {
                    block.push_str(&format!("{ip} {}\n", names.join(" ")));
                }
            }
            block.push_str(&self.end);
            block.push('\n');
            block
        };
        self.rewrite(|text| {
            let mut out = self.strip_block(text);
            if !out.is_empty() && !out.ends_with('\n') {
                out.push('\n');
            }
            out.push_str(&block);
            out
        })
    }

    fn strip_block(&self, text: &str) -> String {
        let mut out = String::with_capacity(text.len());
        let mut inside = false;
        for line in text.split_inclusive('\n') {
            let bare = line.trim_end_matches('\n');
            if bare == self.begin {
                inside = true;
            } else if inside && bare == self.end {
                inside = false;
            } else if !inside {
                out.push_str(line);
            }
        }
        out
    }

    fn rewrite(&self, edit: impl FnOnce(&str) -> String) -> Result<()> {
        let _guard = WRITERS.lock().unwrap_or_else(|p| p.into_inner());
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&self.path)
            .with_context(|| format!("opening {}", self.path.display()))?;
        let mut file = Flock::lock(file, FlockArg::LockExclusive)
            .map_err(|(_, e)| e)
            .with_context(|| format!("locking {}", self.path.display()))?;
        let mut old = String::new();
        file.read_to_string(&mut old)
            .with_context(|| format!("reading {}", self.path.display()))?;
        let new = edit(&old);
        if new == old {
            return Ok(());
        }
        write_in_place(&file, old.len(), new.as_bytes())
            .with_context(|| format!("rewriting {}", self.path.display()))
    }
}

/// Writes `new` over a file of `old_len` bytes so that a reader at any
/// instant sees either the old text or the new text followed by blank lines.
fn write_in_place(file: &File, old_len: usize, new: &[u8]) -> std::io::Result<()> {
    let mut buf = new.to_vec();
    if buf.len() < old_len {
        buf.resize(old_len, b'\n');
    }
    file.write_all_at(&buf, 0)?;
    file.set_len(new.len() as u64)?;
    file.sync_data()
}

impl Drop for HostsBlock {
    fn drop(&mut self) {
        if let Err(e) = self.clear() {
            tracing::warn!("leaving a stale block in {}: {e:#}", self.path.display());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn two_owners_edit_their_own_blocks_and_leave_the_rest_alone() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hosts");
        std::fs::write(&path, "127.0.0.1 localhost\n::1 localhost ip6-localhost\n").unwrap();
        let a = HostsBlock::at(&path).unwrap();
        let b = HostsBlock::at(&path).unwrap();
        a.set(
            "ns/p0",
            ip("127.20.0.1"),
            vec!["p0.svc.ns.svc".into(), "p0.svc.ns.svc.cluster.local".into()],
        )
        .unwrap();
        b.set("ns/q0", ip("127.20.0.2"), vec!["q0.x.ns.svc".into()])
            .unwrap();
        a.set("ns/p1", ip("127.20.0.3"), vec!["p1.svc.ns.svc".into()])
            .unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            text.starts_with("127.0.0.1 localhost\n::1 localhost ip6-localhost\n"),
            "{text}"
        );
        assert!(text.contains("127.20.0.1 p0.svc.ns.svc p0.svc.ns.svc.cluster.local\n"));
        assert!(text.contains("127.20.0.2 q0.x.ns.svc\n"));
        assert!(text.contains("127.20.0.3 p1.svc.ns.svc\n"));

        a.remove("ns/p0").unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(!text.contains("p0.svc"), "{text}");
        assert!(
            text.contains("q0.x.ns.svc") && text.contains("p1.svc.ns.svc"),
            "{text}"
        );

        drop(a);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(!text.contains("p1.svc"), "{text}");
        assert!(text.contains("q0.x.ns.svc"), "{text}");
        drop(b);
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "127.0.0.1 localhost\n::1 localhost ip6-localhost\n"
        );
    }

    #[test]
    fn the_file_is_rewritten_in_place_not_replaced() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hosts");
        std::fs::write(&path, "127.0.0.1 localhost\n").unwrap();
        let inode = std::fs::metadata(&path).unwrap().ino();
        let a = HostsBlock::at(&path).unwrap();
        a.set("k", ip("127.20.1.1"), vec!["n.s.ns.svc".into()])
            .unwrap();
        a.remove("k").unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().ino(), inode);
    }

    #[test]
    fn concurrent_owners_lose_no_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hosts");
        std::fs::write(&path, "").unwrap();
        let blocks: Vec<_> = (0..4).map(|_| HostsBlock::at(&path).unwrap()).collect();
        std::thread::scope(|s| {
            for (i, b) in blocks.iter().enumerate() {
                s.spawn(move || {
                    for j in 0..25 {
                        b.set(
                            &format!("k{j}"),
                            ip(&format!("127.21.{i}.{j}")),
                            vec![format!("h{i}-{j}.s.n.svc")],
                        )
                        .unwrap();
                    }
                });
            }
        });
        let text = std::fs::read_to_string(&path).unwrap();
        for i in 0..4 {
            for j in 0..25 {
                assert!(
                    text.contains(&format!("127.21.{i}.{j} h{i}-{j}.s.n.svc\n")),
                    "missing {i}/{j}"
                );
            }
        }
    }
}
