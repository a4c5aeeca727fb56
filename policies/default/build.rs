//! Links the wasm build with a small shadow stack. The default 1 MiB stack
//! sits below the data and heap, so every evaluation touches pages past the
//! first megabyte; with 128 KiB (plenty for this policy: no recursion
//! beyond serde's few levels) the pages an evaluation touches fit in the
//! region the host keeps resident between instances (see
//! host/src/policy/engine.rs), which saves a page fault per page per call.
fn main() {
    if std::env::var("CARGO_CFG_TARGET_ARCH").as_deref() == Ok("wasm32") {
        println!("cargo:rustc-link-arg-cdylib=-zstack-size={}", 128 << 10);
    }
}
