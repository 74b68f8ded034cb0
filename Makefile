# NeuroNetes build, test and run entry points. Every target installs what it
# needs (Debian packages through apt-get, Go tools from the module proxy).
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
ROOT := $(CURDIR)
GO ?= go
# -trimpath: the same compile flags as the images (e2e/images), so `make run` compiles each
# package once for the demo, localcluster and the images.
LOCALCLUSTER := $(GO) run -trimpath ./e2e/cmd/localcluster
UNIT_PKGS = $$($(GO) list ./... | grep -v '/e2e$$')
# Nested tool modules with tests (hack/tools/scheduler: neuronetes-scheduler's plugins), which the
# root module's ./... does not reach; make unit runs each one's ./... into the same summary.
TOOL_TEST_DIRS = $$(ls hack/tools/*/*_test.go | xargs -n1 dirname | sort -u)
E2E_TIMEOUT ?= 45m
# Fuzzing budgets are execution counts (about 10 s each on the 2-core dev VM): a duration
# -fuzztime can fail with a spurious "context deadline exceeded" when a loaded machine starves
# the workers as the time runs out (golang/go#75804, fixed in Go 1.27; the project pins 1.26).
# FUZZTIME=30s (or =1000000x) overrides every target's budget.
FUZZTIME ?=
fuzzbudget = $(if $(FUZZTIME),$(FUZZTIME),$(1))
# go test -json | testsummary prints go test's usual output, then the skipped tests by reason and
# "summary: N passed, N failed, N skipped"; pipefail keeps go test's exit code.
TESTSUMMARY = $(GO) run ./hack/testsummary

.PHONY: all build tools deps test-deps lint unit e2e test bench bench-autoscale bench-scale bench-gateway \
	cluster-up cluster-down cluster-status images nvidia-images run generate proto deploy-local help fuzz

all: build

help: ## List the targets.
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

build: ## Compile every package and command.
	$(GO) build ./...

deps: ## Install the Debian packages the cluster and tests need (when missing).
	bash hack/install-deps.sh

tools: ## Build the pinned cluster binaries, helm and controller-gen into .local/ (cached by version).
	bash hack/build-tools.sh all

test-deps: deps ## Run every hack/test-deps.d script (CRIU, minio, ...).
	@for f in hack/test-deps.d/*.sh; do [ -e "$$f" ] || continue; echo "== $$f"; bash "$$f"; done

lint: ## gofmt, go vet (the nested tool modules too), and generated protobuf code up to date.
	@out=$$(gofmt -l $$(git ls-files '*.go') 2>/dev/null); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	for d in $(TOOL_TEST_DIRS); do (cd "$$d" && $(GO) vet ./...) || exit 1; done
	bash hack/gen-proto.sh --check

unit: ## Unit tests (no cluster), the nested tool modules' too; ends with the skipped tests by reason (hack/testsummary). The bind-fetch benchmark and the scoring simulation run in make bench.
	{ rc=0; $(GO) test -count=1 -json -skip '^TestBindFetchBench$$' $(UNIT_PKGS) || rc=$$?; \
	  for d in $(TOOL_TEST_DIRS); do (cd "$$d" && $(GO) test -count=1 -json -skip '^TestScoringSimulation$$' ./...) || rc=$$?; done; \
	  exit $$rc; } 2>&1 | $(TESTSUMMARY)

e2e: tools deps ## End-to-end tests on the local real cluster (started and stopped when not running; the controller benchmark and the simulator-fidelity check run in make bench).
	NEURONETES_E2E=1 $(GO) test -count=1 -timeout $(E2E_TIMEOUT) -json -skip '^(TestControllerBenchWarmVsCold|TestAutoscalerMatchesSimulator|TestAgentSessionBenchResume|TestAgentSessionBenchDensity|TestAgentSessionBenchClaim)$$' ./e2e/ 2>&1 | $(TESTSUMMARY) -v | tee .local/e2e.log | grep -E '^(=== RUN|--- |PASS|FAIL|ok|panic|e2e:|  - |a package|\s+\S+_test.go)|\[e2e\]|^(skipped tests by reason|summary:|  +[0-9]+  )'

test: test-deps tools lint unit fuzz e2e ## Everything CI runs (fuzzing about 10 s per target).
# Under make test a missing required tool fails its test (internal/testreq), as under CI=true.
test: export NEURONETES_TEST_STRICT := 1

fuzz: ## Short fuzzing runs of the sidecar's decoders and validator (execution budgets of ~10 s each; FUZZTIME overrides).
	$(GO) test ./sidecar/frame -run '^$$' -fuzz '^FuzzOpen$$' -fuzztime $(call fuzzbudget,300000x)
	$(GO) test ./sidecar/server -run '^$$' -fuzz '^FuzzDecodeSession$$' -fuzztime $(call fuzzbudget,25000x)
	$(GO) test ./sidecar/server -run '^$$' -fuzz '^FuzzDecodeVectorRequests$$' -fuzztime $(call fuzzbudget,40000x)
	$(GO) test ./sidecar/store -run '^$$' -fuzz '^FuzzValidJSON$$' -fuzztime $(call fuzzbudget,150000x)

bench: tools deps ## Every benchmark (hack/bench.d/*.sh): medians, ratios, its verdict last; fails when one misses its target.
	@failed=""; for f in hack/bench.d/*.sh; do [ -e "$$f" ] || continue; echo "== $$f"; bash "$$f" || failed="$$failed $$f"; done; \
	if [ -n "$$failed" ]; then echo "bench: missed a target or not measured:$$failed"; exit 1; fi; echo "bench: every target met"

bench-autoscale: ## The autoscaler's trace-driven comparison; TRACE=<file>[,<file>...] replays other traces (a missing one fails).
	bash hack/bench.d/40-autoscale.sh

bench-scale: tools deps ## The scheduler scale benchmark, the gang benchmark and the scoring benchmark (neuronetes-scheduler vs the default scheduler) with kwok GPU nodes.
	@rc=0; bash hack/bench.d/60-scale.sh || rc=1; bash hack/bench.d/62-gangs.sh || rc=1; bash hack/bench.d/64-scoring.sh || rc=1; exit $$rc

bench-gateway: deps ## The gateway's overhead and routing-quality benchmarks against demo agents.
	bash hack/bench.d/70-gateway.sh

cluster-up: deps ## Start the local real cluster (idempotent).
	bash hack/build-tools.sh cluster
	$(LOCALCLUSTER) up

cluster-down: ## Stop the local cluster and restore the host.
	$(LOCALCLUSTER) down

cluster-status: ## Exit 0 when the local cluster runs.
	$(LOCALCLUSTER) status

images: ## Build every cmd/ image and import it into the local containerd.
	$(LOCALCLUSTER) images

nvidia-images: ## Import the nvidia-smi stand-in under the image names of NVIDIA's GPU quickstart specs (docs/driver.md).
	$(LOCALCLUSTER) nvidia-images

deploy-local: cluster-up ## Install the Helm chart into the local cluster with locally built images.
	bash hack/deploy-local.sh

proto: ## Regenerate the checked-in protobuf Go code (hack/gen-proto.sh; pinned buf and plugins).
	bash hack/gen-proto.sh

generate: ## Regenerate deepcopy code and CRDs with controller-gen.
	bash hack/build-tools.sh controller-gen
	.local/bin/controller-gen object paths=./api/... crd:allowDangerousTypes=false paths=./api/... output:crd:dir=deploy/crds
	bash hack/deploy-local.sh --sync-crds

run: deps ## The main job: build, start the local cluster, deploy NeuroNetes, run the demo.
	bash hack/build-tools.sh run
	$(GO) run -trimpath ./e2e/cmd/demo
