//! `etcd-steward policy new`: writes a policy project that builds and passes
//! `policy test` as it is. Each language's template carries its SDK and the
//! WIT contract beside the policy, so the project needs nothing from this
//! repository: only the language's own package registry.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use clap::ValueEnum;

/// The WIT contract, as every template writes it.
const WIT: &str = include_str!("../../../../wit/status-policy.wit");

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Lang {
    /// wit-bindgen through the Rust SDK; cargo and the wasm32-wasip2 target.
    Rust,
    /// componentize-py through the Python SDK; python3 and PyPI.
    Python,
    /// componentize-js through the JavaScript SDK; Node.js 20 and npm.
    Js,
}

/// A file of a template: where it goes in the project, and its text with
/// `{{name}}` (the policy's name) and `{{crate}}` (the same with `_` for `-`).
type File = (&'static str, &'static str);

macro_rules! embed {
    ($($to:literal => $from:literal),* $(,)?) => {
        &[$(($to, include_str!(concat!("../../../../", $from)))),*]
    };
}

const RUST: &[File] = embed![
    "Cargo.toml" => "policies/sdk/template/Cargo.toml",
    "rust-toolchain.toml" => "policies/sdk/template/rust-toolchain.toml",
    "README.md" => "policies/sdk/template/README.md",
    "src/lib.rs" => "policies/sdk/template/src/lib.rs",
    "tests/basic.yaml" => "policies/sdk/template/tests/basic.yaml",
    "steward-policy-sdk/Cargo.toml" => "policies/sdk/Cargo.toml",
    "steward-policy-sdk/src/lib.rs" => "policies/sdk/src/lib.rs",
    "steward-policy-sdk/src/finding.rs" => "policies/sdk/src/finding.rs",
    "steward-policy-sdk/src/guest.rs" => "policies/sdk/src/guest.rs",
    "steward-policy-sdk/src/member_id.rs" => "policies/sdk/src/member_id.rs",
    "steward-policy-sdk/src/settings.rs" => "policies/sdk/src/settings.rs",
    "steward-policy-sdk/src/testing.rs" => "policies/sdk/src/testing.rs",
    "steward-policy-sdk/src/testing/tests.rs" => "policies/sdk/src/testing/tests.rs",
];

const PYTHON: &[File] = embed![
    "app.py" => "policies/python/template/app.py",
    "README.md" => "policies/python/template/README.md",
    "tests/basic.yaml" => "policies/python/template/tests/basic.yaml",
    "build.sh" => "policies/python/build.sh",
    "requirements.txt" => "policies/python/requirements.txt",
    "steward_policy/__init__.py" => "policies/python/steward_policy/__init__.py",
    "wit/README.md" => "wit/README.md",
];

const JS: &[File] = embed![
    "policy.js" => "policies/js/template/policy.js",
    "README.md" => "policies/js/template/README.md",
    "package.json" => "policies/js/template/package.json",
    "package-lock.json" => "policies/js/template/package-lock.json",
    ".gitignore" => "policies/js/template/.gitignore",
    "tests/basic.yaml" => "policies/js/template/tests/basic.yaml",
    "sdk/policy.js" => "policies/js/sdk/policy.js",
    "sdk/policy.d.ts" => "policies/js/sdk/policy.d.ts",
    "sdk/wit.d.ts" => "policies/js/sdk/wit.d.ts",
    "wit/README.md" => "wit/README.md",
];

/// Files a template writes executable.
const EXECUTABLE: &[&str] = &["build.sh"];

impl Lang {
    /// The language's name, as a person writes it ("JavaScript", not `js`).
    fn display_name(self) -> &'static str {
        match self {
            Lang::Rust => "Rust",
            Lang::Python => "Python",
            Lang::Js => "JavaScript",
        }
    }

    fn files(self) -> &'static [File] {
        match self {
            Lang::Rust => RUST,
            Lang::Python => PYTHON,
            Lang::Js => JS,
        }
    }

    /// Where the template expects the WIT file.
    fn wit_path(self) -> &'static str {
        match self {
            Lang::Rust => "steward-policy-sdk/wit/status-policy.wit",
            Lang::Python | Lang::Js => "wit/status-policy.wit",
        }
    }

    /// The commands that build and test the new project, for the summary.
    fn next_steps(self, name: &str) -> String {
        match self {
            Lang::Rust => format!(
                "cargo test\n  cargo build --target wasm32-wasip2 --release\n  \
                 etcd-steward policy test --policy target/wasm32-wasip2/release/{}.wasm tests/",
                crate_name(name)
            ),
            Lang::Python => format!(
                "./build.sh {name}.wasm\n  etcd-steward policy test --policy {name}.wasm tests/"
            ),
            Lang::Js => format!(
                "npm ci\n  npm run build\n  etcd-steward policy test --policy {name}.wasm tests/"
            ),
        }
    }
}

/// A name fit for a crate, a Python module and an npm package alike.
fn check_name(name: &str) -> anyhow::Result<()> {
    let ok = name.len() <= 64
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !name.ends_with('-');
    if !ok {
        bail!(
            "{name:?} is not a policy name: use 1 to 64 lowercase letters, digits and dashes, \
             starting with a letter (it names a crate, a Python module or an npm package)"
        );
    }
    Ok(())
}

fn crate_name(name: &str) -> String {
    name.replace('-', "_")
}

/// Writes the project into `dir/name` and returns its path. Refuses to
/// write into a directory that holds anything.
pub fn scaffold(lang: Lang, name: &str, dir: &Path) -> anyhow::Result<PathBuf> {
    check_name(name)?;
    let root = dir.join(name);
    if root.exists()
        && std::fs::read_dir(&root)
            .with_context(|| format!("reading {}", root.display()))?
            .next()
            .is_some()
    {
        bail!(
            "{} already exists and is not empty; nothing was written",
            root.display()
        );
    }
    let fill = |text: &str| {
        text.replace("{{name}}", name)
            .replace("{{crate}}", &crate_name(name))
    };
    let files = lang
        .files()
        .iter()
        .map(|(path, text)| (*path, fill(text)))
        .chain(std::iter::once((lang.wit_path(), WIT.to_owned())));
    for (path, text) in files {
        let to = root.join(path);
        if let Some(parent) = to.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("creating {}", parent.display()))?;
        }
        std::fs::write(&to, text).with_context(|| format!("writing {}", to.display()))?;
        if EXECUTABLE.contains(&path) {
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o755))
                .with_context(|| format!("making {} executable", to.display()))?;
        }
    }
    Ok(root)
}

/// What to run next, printed after the files are written.
pub fn summary(lang: Lang, name: &str, root: &Path) -> String {
    format!(
        "wrote {} policy {name} to {}\nnext, in that directory:\n  {}\n",
        lang.display_name(),
        root.display(),
        lang.next_steps(name)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_that_cannot_name_a_package_are_refused() {
        for bad in ["", "Upper", "1st", "with_underscore", "dash-", "sp ace"] {
            let err = check_name(bad).unwrap_err().to_string();
            assert!(err.contains("is not a policy name"), "{bad}: {err}");
        }
        check_name("voters-down2").unwrap();
    }

    #[test]
    fn the_summary_names_the_language_as_people_write_it() {
        let root = Path::new("/tmp/x");
        for (lang, shown) in [
            (Lang::Rust, "wrote Rust policy"),
            (Lang::Python, "wrote Python policy"),
            (Lang::Js, "wrote JavaScript policy"),
        ] {
            let text = summary(lang, "x", root);
            assert!(text.starts_with(shown), "{text}");
        }
    }

    #[test]
    fn a_non_empty_directory_is_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("mine")).unwrap();
        std::fs::write(dir.path().join("mine/keep.txt"), "x").unwrap();
        let err = scaffold(Lang::Rust, "mine", dir.path()).unwrap_err();
        assert!(err.to_string().contains("not empty"), "{err}");
        assert_eq!(
            std::fs::read_dir(dir.path().join("mine")).unwrap().count(),
            1
        );
    }

    /// Every file under `dir` (relative to it), tool caches aside.
    fn files_under(dir: &Path) -> Vec<String> {
        let mut out = Vec::new();
        let mut stack = vec![dir.to_path_buf()];
        while let Some(at) = stack.pop() {
            for entry in std::fs::read_dir(&at).unwrap() {
                let path = entry.unwrap().path();
                let name = path.file_name().unwrap().to_string_lossy().into_owned();
                if name == "node_modules" || name == "__pycache__" {
                    continue;
                }
                if path.is_dir() {
                    stack.push(path);
                } else {
                    out.push(path.strip_prefix(dir).unwrap().display().to_string());
                }
            }
        }
        out
    }

    /// Each template carries its whole SDK and every file of its template
    /// directory: a file added there must be embedded too, or scaffolded
    /// projects would not build.
    #[test]
    fn every_template_embeds_its_whole_sdk_and_template() {
        let root = steward_testbed::repo::root();
        let expect = [
            (Lang::Rust, "policies/sdk/src", "steward-policy-sdk/src/"),
            (Lang::Rust, "policies/sdk/template", ""),
            (
                Lang::Python,
                "policies/python/steward_policy",
                "steward_policy/",
            ),
            (Lang::Python, "policies/python/template", ""),
            (Lang::Js, "policies/js/sdk", "sdk/"),
            (Lang::Js, "policies/js/template", ""),
        ];
        for (lang, dir, prefix) in expect {
            for file in files_under(&root.join(dir)) {
                let to = format!("{prefix}{file}");
                assert!(
                    lang.files().iter().any(|(path, _)| *path == to),
                    "{dir}/{file} is not embedded in the {lang:?} template as {to}"
                );
            }
        }
    }
}
