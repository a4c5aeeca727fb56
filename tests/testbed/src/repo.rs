//! Where the repository is, found when the code runs rather than when it
//! was compiled.
//!
//! `env!("CARGO_MANIFEST_DIR")` bakes in the path of the checkout that
//! built this crate. The target dir is cached outside the clone and shared
//! between checkouts, and cargo reuses a path crate's artifacts when its
//! sources are older than them, so a baked path can name another checkout
//! (or one that no longer exists). cargo sets `CARGO_MANIFEST_DIR` for the
//! processes it runs (`cargo test`, `cargo run`, `cargo bench`), so the
//! running crate's manifest dir is read first; the compiled-in one is only
//! the fallback for a binary started directly.

use std::path::{Path, PathBuf};

/// The workspace root: the nearest ancestor of the running crate's
/// manifest dir that holds `Cargo.lock`.
pub fn root() -> PathBuf {
    let start = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    start
        .ancestors()
        .find(|dir| dir.join("Cargo.lock").is_file())
        .map(Path::to_path_buf)
        .unwrap_or(start)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_root_holds_the_workspace_manifest_and_this_file() {
        let root = super::root();
        assert!(root.join("Cargo.lock").is_file(), "{}", root.display());
        assert!(root.join("tests/testbed/src/repo.rs").is_file());
    }
}
