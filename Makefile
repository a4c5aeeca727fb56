# The two commands in README.md are `make sandbox` and `make test`.
# Both install what they need first (scripts/prereqs.sh).

# Build output lives outside the clone so that fresh clones (and CI) reuse it.
export CARGO_TARGET_DIR ?= $(HOME)/.cache/etcd-steward/target
CARGO ?= cargo

.PHONY: prereqs sandbox test lint build crds image chart

# The release: `make image chart REGISTRY=registry.example.com/team`.
VERSION := $(shell sed -n 's/^version = "\(.*\)"$$/\1/p' Cargo.toml | head -n1)
TAG ?= $(VERSION)

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

# The operator's OCI image, REGISTRY/etcd-steward:TAG (scripts/build-image.sh).
image: prereqs
	@test -n "$(REGISTRY)" || { echo "make image REGISTRY=host[:port][/path]"; exit 2; }
	scripts/build-image.sh $(REGISTRY)/etcd-steward:$(TAG)

# The Helm chart as an OCI artifact, oci://REGISTRY/charts/etcd-steward (scripts/push-chart.sh).
chart: prereqs
	@test -n "$(REGISTRY)" || { echo "make chart REGISTRY=host[:port][/path]"; exit 2; }
	scripts/push-chart.sh $(REGISTRY)
