#!/usr/bin/env bash
# build-tools.sh builds the pinned binaries of the local e2e cluster into
# .local/tools/<name>-<version>/ and links them into .local/bin. A binary that
# already exists for its version is not rebuilt, so a warm run costs seconds.
#
#   bash hack/build-tools.sh TOOL...   k8s (Kubernetes and CoreDNS), etcd, containerd,
#                                      kube-network-policies, neuronetes-scheduler, kwok, helm,
#                                      controller-gen, buf, protoc-gen-go, protoc-gen-go-grpc, or a
#                                      group built in parallel: cluster (make cluster-up), run (make
#                                      run), proto, all (make tools)
#
# Each build logs its wall time, CPU time and peak memory.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
tools="$root/.local/tools"
bin="$root/.local/bin"
mkdir -p "$tools" "$bin"

K8S_VERSION=v1.37.2
ETCD_VERSION=v3.7.0
CONTAINERD_VERSION=v2.4.2
KWOK_VERSION=v0.8.0
HELM_VERSION=v4.3.1
CONTROLLER_GEN_VERSION=v0.23.0
# The protobuf generators (hack/gen-proto.sh): buf compiles, the plugins write Go.
# PROTOC_GEN_GO_VERSION matches google.golang.org/protobuf in go.mod.
BUF_VERSION=v1.75.0
PROTOC_GEN_GO_VERSION=v1.36.12
PROTOC_GEN_GO_GRPC_VERSION=v1.6.2
# The local cluster's NetworkPolicy enforcer; hack/tools/netpol pins the same version in its go.mod
# and wraps its controller in a command that takes a kubeconfig.
KUBE_NETWORK_POLICIES_VERSION=v0.8.0

log() { printf '[build-tools] %s\n' "$*" >&2; }

# timed NAME CMD...: runs CMD and logs its wall and CPU time (user+sys, children included) and peak
# memory, so a cold build reports what each tool costs.
timed() {
	local name=$1; shift
	if [ -x /usr/bin/time ]; then
		/usr/bin/time -f "[build-tools] $name built: %e s wall, %U s user + %S s sys CPU, peak RSS %M KB" "$@"
	else
		"$@"
	fi
}

# group TOOL...: builds the tools in parallel, one background build each, and fails when one
# failed. On 2 cores this overlaps downloads and the single-threaded link steps with the compiles of
# the others; memory peaks at about 3 GB for Kubernetes and less for each other tool.
# BUILD_TOOLS_SERIAL=1 builds them one after the other.
group() {
	if [ "${BUILD_TOOLS_SERIAL:-0}" = 1 ]; then
		"$0" "$@"
		return
	fi
	local pids=() failed=0 p
	for t in "$@"; do
		"$0" "$t" &
		pids+=($!)
	done
	for p in "${pids[@]}"; do wait "$p" || failed=1; done
	return $failed
}

# link NAME DIR: points .local/bin/NAME at DIR/NAME.
link() { ln -sfn "$2/$1" "$bin/$1"; }

# lock NAME: serialises concurrent builds of one tool (held until exit).
lock() {
	local fd
	exec {fd}>"$tools/.$1.lock"
	flock "$fd"
}

# have DIR NAME...: true when every NAME exists in DIR.
have() {
	local dir=$1; shift
	for n in "$@"; do [ -x "$dir/$n" ] || return 1; done
}

# build_k8s builds the Kubernetes commands and CoreDNS (hack/tools/k8s/coredns, pinned in the same
# module so client-go and its dependencies compile once) with one `go install`, so every package is
# compiled once for all of them. Only the missing binaries are built.
build_k8s() {
	local dir="$tools/kubernetes-$K8S_VERSION"
	local names=(kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl kube-proxy coredns)
	have "$dir" "${names[@]}" || lock kubernetes
	local missing=() pkgs=()
	for n in "${names[@]}"; do [ -x "$dir/$n" ] || missing+=("$n"); done
	if [ ${#missing[@]} -gt 0 ]; then
		log "building ${missing[*]} (Kubernetes $K8S_VERSION; cold: about 10 minutes on 2 cores)"
		local minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
		local ld="-s -w"
		for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
			ld+=" -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
		done
		for n in "${missing[@]}"; do
			case $n in
			coredns) pkgs+=(neuronetes.io/tools/k8s/coredns) ;;
			*) pkgs+=("k8s.io/kubernetes/cmd/$n") ;;
			esac
		done
		rm -rf "$dir.tmp" && mkdir -p "$dir.tmp" "$dir"
		(cd "$root/hack/tools/k8s" && GOBIN="$dir.tmp" CGO_ENABLED=0 timed kubernetes go install -trimpath -ldflags "$ld" "${pkgs[@]}")
		for n in "${missing[@]}"; do mv -f "$dir.tmp/$n" "$dir/$n"; done
		rmdir "$dir.tmp"
	fi
	for n in "${names[@]}"; do link "$n" "$dir"; done
}

build_etcd() {
	local dir="$tools/etcd-$ETCD_VERSION"
	have "$dir" etcd || lock etcd
	if ! have "$dir" etcd; then
		log "building etcd $ETCD_VERSION"
		mkdir -p "$dir"
		(cd "$root/hack/tools/etcd" && CGO_ENABLED=0 timed etcd go build -trimpath -ldflags "-s -w" -o "$dir/etcd.tmp" . && mv "$dir/etcd.tmp" "$dir/etcd")
	fi
	link etcd "$dir"
}

# build_netpol builds the NetworkPolicy enforcer (hack/tools/netpol) into
# .local/tools/kube-network-policies-<version>-<hash of hack/tools/netpol>/: the command there is
# the project's own code, so a change to it is a new build.
build_netpol() {
	local src
	src=$(cd "$root/hack/tools/netpol" && cat go.mod go.sum *.go | sha256sum | cut -c1-12)
	local dir="$tools/kube-network-policies-$KUBE_NETWORK_POLICIES_VERSION-$src"
	have "$dir" kube-network-policies || lock kube-network-policies
	if ! have "$dir" kube-network-policies; then
		log "building kube-network-policies $KUBE_NETWORK_POLICIES_VERSION"
		mkdir -p "$dir"
		(cd "$root/hack/tools/netpol" && CGO_ENABLED=0 timed kube-network-policies go build -trimpath -ldflags "-s -w" -o "$dir/kube-network-policies.tmp" . && mv "$dir/kube-network-policies.tmp" "$dir/kube-network-policies")
	fi
	link kube-network-policies "$dir"
}

# build_scheduler builds neuronetes-scheduler (hack/tools/scheduler: kube-scheduler $K8S_VERSION with
# NeuroNetes' Score plugins) into .local/tools/neuronetes-scheduler-<version>-<hash>/: the hash
# covers the command and the main module's packages it compiles in (scheduler/scoring,
# controller/cost, api/v1alpha1, gateway/poolview: `go list -deps` in hack/tools/scheduler lists
# them), so a change to them is a new build. Version-stamped as build_k8s.
build_scheduler() {
	local src
	src=$(cd "$root" && ls hack/tools/scheduler/*.go scheduler/scoring/*.go controller/cost/*.go api/v1alpha1/*.go gateway/poolview/*.go |
		grep -v '_test\.go$' | xargs cat hack/tools/scheduler/go.mod hack/tools/scheduler/go.sum go.mod | sha256sum | cut -c1-12)
	local dir="$tools/neuronetes-scheduler-$K8S_VERSION-$src"
	have "$dir" neuronetes-scheduler || lock neuronetes-scheduler
	if ! have "$dir" neuronetes-scheduler; then
		log "building neuronetes-scheduler (kube-scheduler $K8S_VERSION with NeuroNetes plugins; cold: about 5 minutes on 2 cores)"
		local minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
		local ld="-s -w"
		for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
			ld+=" -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
		done
		mkdir -p "$dir"
		(cd "$root/hack/tools/scheduler" && CGO_ENABLED=0 timed neuronetes-scheduler go build -trimpath -ldflags "$ld" -o "$dir/neuronetes-scheduler.tmp" . && mv "$dir/neuronetes-scheduler.tmp" "$dir/neuronetes-scheduler")
	fi
	link neuronetes-scheduler "$dir"
}

# goinstall NAME VERSION PKG...: go install of module packages at a version.
goinstall() {
	local name=$1 version=$2; shift 2
	local dir="$tools/$name-$version"
	local bins=()
	for p in "$@"; do bins+=("$(basename "${p%@*}")"); done
	have "$dir" "${bins[@]}" || lock "$name"
	if ! have "$dir" "${bins[@]}"; then
		log "building $name $version"
		mkdir -p "$dir.tmp"
		GOBIN="$dir.tmp" CGO_ENABLED=0 GOFLAGS=-trimpath timed "$name" go install -ldflags "-s -w" "$@"
		rm -rf "$dir" && mv "$dir.tmp" "$dir"
	fi
	for b in "${bins[@]}"; do link "$b" "$dir"; done
}

want=${*:-all}
for t in $want; do
	case $t in
	k8s) build_k8s ;;
	etcd) build_etcd ;;
	kube-network-policies) build_netpol ;;
	neuronetes-scheduler) build_scheduler ;;
	containerd) goinstall containerd "$CONTAINERD_VERSION" \
		"github.com/containerd/containerd/v2/cmd/containerd@$CONTAINERD_VERSION" \
		"github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2@$CONTAINERD_VERSION" \
		"github.com/containerd/containerd/v2/cmd/ctr@$CONTAINERD_VERSION" ;;
	kwok) goinstall kwok "$KWOK_VERSION" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION" ;;
	helm) goinstall helm "$HELM_VERSION" "helm.sh/helm/v4/cmd/helm@$HELM_VERSION" ;;
	controller-gen) goinstall controller-gen "$CONTROLLER_GEN_VERSION" "sigs.k8s.io/controller-tools/cmd/controller-gen@$CONTROLLER_GEN_VERSION" ;;
	buf) goinstall buf "$BUF_VERSION" "github.com/bufbuild/buf/cmd/buf@$BUF_VERSION" ;;
	protoc-gen-go) goinstall protoc-gen-go "$PROTOC_GEN_GO_VERSION" "google.golang.org/protobuf/cmd/protoc-gen-go@$PROTOC_GEN_GO_VERSION" ;;
	protoc-gen-go-grpc) goinstall protoc-gen-go-grpc "$PROTOC_GEN_GO_GRPC_VERSION" "google.golang.org/grpc/cmd/protoc-gen-go-grpc@$PROTOC_GEN_GO_GRPC_VERSION" ;;
	proto) "$0" buf protoc-gen-go protoc-gen-go-grpc ;;
	# What `make cluster-up` runs, what `make run` needs (kwok and controller-gen only serve tests
	# and `make generate`), and everything.
	cluster) group etcd k8s containerd kube-network-policies ;;
	run) group etcd k8s containerd kube-network-policies helm ;;
	all) group etcd k8s containerd kube-network-policies kwok helm controller-gen ;;
	*) log "unknown tool $t"; exit 2 ;;
	esac
done
