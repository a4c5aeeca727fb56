# The two commands in README.md are `make sandbox` and `make test`.
# Both install what they need first (scripts/prereqs.sh).

# Build output lives outside the clone so that fresh clones (and CI) reuse it.
export CARGO_TARGET_DIR ?= $(HOME)/.cache/etcd-steward/target
CARGO ?= cargo

.PHONY: prereqs sandbox test lint build crds

prereqs:
	@scripts/prereqs.sh

build: prereqs
	$(CARGO) build --workspace

sandbox: prereqs
	$(CARGO) run -p etcd-steward --features sandbox -- sandbox

test: prereqs
	scripts/test.sh

lint: prereqs
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets --all-features -- -D warnings
