#!/usr/bin/env bash
# Installs (or upgrades) the NeuroNetes Helm chart into the local real cluster with locally built
# images: `make deploy-local`. Idempotent; re-running upgrades the release.
#
#   bash hack/deploy-local.sh                 build images, start host Redis, helm upgrade --install --wait
#   bash hack/deploy-local.sh --sync-crds     only copy deploy/crds and deploy/deviceclasses into the chart
#   bash hack/deploy-local.sh --uninstall     helm uninstall the release, delete the redis Service (and
#                                             stop the Redis it started)
#
# The chart is installed with the values a real cluster uses (deploy/helm/values/local.yaml adds only
# local images, mock NVML, no GPU node label, a smaller gateway CPU request and the node agent's
# checkpointing, whose containerd socket this script sets to the local cluster's). Redis for injected sidecars is a host redis-server on
# the cluster bridge behind a Service `redis` (no selector; an EndpointSlice names the host address) in
# the release namespace, so sidecars reach it as redis.<namespace>.svc.cluster.local:6379 through
# CoreDNS and kube-proxy, as they would reach a Redis Service on a real cluster.
#
# Environment:
#   RELEASE (neuronetes)  NAMESPACE (neuronetes-system)  HELM_TIMEOUT (5m)
#   SKIP_IMAGES=1         do not rebuild/import the images (already in containerd)
#   IMAGES                components to build (driver nodeagent controller gateway sidecar demo-agent)
#   REDIS_ADDR            the host Redis (IP:port on the bridge) behind the redis Service (default
#                         10.88.0.1:6379, started here if absent)
#   HELM_ARGS             extra helm arguments, e.g. "--set driver.nvml=mock:dgxh100 -f my.yaml"
#   SCHEDULER=1           also run neuronetes-scheduler (scheduler.enabled=true): its image, built from
#                         hack/tools/scheduler, joins IMAGES
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
RELEASE=${RELEASE:-neuronetes}
NAMESPACE=${NAMESPACE:-neuronetes-system}
HELM_TIMEOUT=${HELM_TIMEOUT:-5m}
IMAGES=${IMAGES:-driver nodeagent controller gateway sidecar demo-agent}
REDIS_ADDR=${REDIS_ADDR:-10.88.0.1:6379}
CHART=deploy/helm/neuronetes
if [ "${SCHEDULER:-0}" = 1 ] && [[ " $IMAGES " != *" neuronetes-scheduler "* ]]; then
	IMAGES="$IMAGES neuronetes-scheduler"
fi
KUBECONFIG_FILE=$ROOT/.local/kubeconfig
HELM=$ROOT/.local/bin/helm
KUBECTL=$ROOT/.local/bin/kubectl
REDIS_DIR=$ROOT/.local/redis

log() { echo "[deploy-local] $*"; }

# sync_crds keeps the chart's crds/ identical to deploy/crds (the controller-gen output) and its
# files/deviceclasses/ to deploy/deviceclasses (the driver's); deploy/helm/chart_test.go fails when
# they drift.
sync_crds() {
	mkdir -p "$CHART/crds" "$CHART/files/deviceclasses/compat"
	rm -f "$CHART"/crds/*.yaml "$CHART"/files/deviceclasses/*.yaml "$CHART"/files/deviceclasses/compat/*.yaml
	cp deploy/crds/*.yaml "$CHART/crds/"
	cp deploy/deviceclasses/*.yaml "$CHART/files/deviceclasses/"
	cp deploy/deviceclasses/compat/*.yaml "$CHART/files/deviceclasses/compat/"
}

# redis_service prints the Service `redis` and its EndpointSlice for the host Redis at $1:$2.
redis_service() {
	cat <<YAML
apiVersion: v1
kind: Service
metadata:
  name: redis
  labels: {app.kubernetes.io/part-of: neuronetes, app.kubernetes.io/managed-by: deploy-local}
spec:
  ports: [{name: redis, port: 6379, protocol: TCP}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: redis-host
  labels:
    kubernetes.io/service-name: redis
    endpointslice.kubernetes.io/managed-by: deploy-local.neuronetes.io
addressType: IPv4
ports: [{name: redis, port: $2, protocol: TCP}]
endpoints: [{addresses: ["$1"], conditions: {ready: true}}]
YAML
}

case "${1:-}" in
--sync-crds)
	sync_crds
	log "chart CRDs and DeviceClasses synced from deploy/crds and deploy/deviceclasses"
	exit 0
	;;
--uninstall)
	"$HELM" uninstall "$RELEASE" -n "$NAMESPACE" --kubeconfig "$KUBECONFIG_FILE" --wait || true
	"$KUBECTL" --kubeconfig "$KUBECONFIG_FILE" -n "$NAMESPACE" delete service/redis endpointslice/redis-host \
		--ignore-not-found >/dev/null 2>&1 || true
	if [ -f "$REDIS_DIR/redis.pid" ]; then
		kill "$(cat "$REDIS_DIR/redis.pid")" 2>/dev/null || true
		rm -f "$REDIS_DIR/redis.pid"
	fi
	exit 0
	;;
"") ;;
*)
	echo "usage: $0 [--sync-crds|--uninstall]" >&2
	exit 2
	;;
esac

[ -x "$HELM" ] || bash hack/build-tools.sh helm
if [ ! -f "$KUBECONFIG_FILE" ] || ! go run -trimpath ./e2e/cmd/localcluster status >/dev/null 2>&1; then
	echo "the local cluster is not running: run 'make cluster-up' first" >&2
	exit 1
fi
sync_crds

if [ "${SKIP_IMAGES:-0}" != 1 ]; then
	log "building and importing images: $IMAGES"
	# shellcheck disable=SC2086
	go run -trimpath ./e2e/cmd/localcluster images $IMAGES
fi

# Injected sidecars keep sessions in Redis: the host's redis-server on the bridge, behind the Service
# `redis` of the release namespace.
redis_host=${REDIS_ADDR%:*} redis_port=${REDIS_ADDR##*:}
if ! [[ $redis_host =~ ^[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+$ && $redis_port =~ ^[0-9]+$ ]]; then
	echo "REDIS_ADDR=$REDIS_ADDR: want IPv4:port of the host Redis (the redis Service's endpoint)" >&2
	exit 2
fi
if ! (exec 3<>"/dev/tcp/$redis_host/$redis_port") 2>/dev/null; then
	if [ "$REDIS_ADDR" = 10.88.0.1:6379 ] && command -v redis-server >/dev/null && ip -4 addr show | grep -q 'inet 10.88.0.1/'; then
		mkdir -p "$REDIS_DIR"
		log "starting redis-server on $REDIS_ADDR (data in $REDIS_DIR)"
		# The chart's own Redis configuration (appendfsync always, noeviction) with its default maxmemory.
		redis-server "$ROOT/deploy/helm/neuronetes/files/redis.conf" --maxmemory 768mb \
			--bind "$redis_host" --port "$redis_port" --protected-mode no --daemonize yes \
			--pidfile "$REDIS_DIR/redis.pid" --dir "$REDIS_DIR" --logfile "$REDIS_DIR/redis.log"
	else
		log "warning: no Redis at $REDIS_ADDR; injected sidecars will not become ready (set REDIS_ADDR)"
	fi
fi

"$KUBECTL" --kubeconfig "$KUBECONFIG_FILE" create namespace "$NAMESPACE" --dry-run=client -o yaml |
	"$KUBECTL" --kubeconfig "$KUBECONFIG_FILE" apply -f - >/dev/null
redis_service "$redis_host" "$redis_port" |
	"$KUBECTL" --kubeconfig "$KUBECONFIG_FILE" -n "$NAMESPACE" apply --server-side --force-conflicts -f - >/dev/null
log "Service redis.$NAMESPACE.svc.cluster.local:6379 -> host Redis $REDIS_ADDR"

# CRDs: helm installs crds/ only on first install; apply them so upgrades pick up schema changes.
"$KUBECTL" --kubeconfig "$KUBECONFIG_FILE" apply --server-side --force-conflicts -f deploy/crds/ >/dev/null

# DeviceClasses are cluster-wide: when another installation (deploy/deviceclasses) owns them, reuse.
extra=()
owner=$("$KUBECTL" --kubeconfig "$KUBECONFIG_FILE" get deviceclass gpu.neuronetes.io \
	-o jsonpath='{.metadata.annotations.meta\.helm\.sh/release-name}' 2>/dev/null || echo absent)
if [ "$owner" != absent ] && [ "$owner" != "$RELEASE" ]; then
	log "DeviceClass gpu.neuronetes.io exists outside release $RELEASE: deviceClasses.create=false"
	extra+=(--set deviceClasses.create=false)
fi

# helm upgrade rolls pods only when their template changes, and the local images keep one tag
# (:dev): each workload's pods carry a digest of the image tarballs they run, so a rebuilt binary
# rolls them and an unchanged one does not (the tarballs are reproducible).
image_digest() {
	local n f sums=""
	for n in "$@"; do
		f=$ROOT/.local/images/$n.tar
		[ -f "$f" ] || return 0
		sums+=$(sha256sum "$f" | cut -d' ' -f1)
	done
	printf '%s' "$sums" | sha256sum | cut -c1-16
}
if [ "${SCHEDULER:-0}" = 1 ]; then
	extra+=(--set scheduler.enabled=true)
fi
for pair in controller:controller node:driver,nodeagent gateway:gateway dispatcher:dispatcher scheduler:neuronetes-scheduler; do
	key=${pair%%:*} names=${pair#*:}
	# shellcheck disable=SC2086
	d=$(image_digest ${names//,/ })
	[ -n "$d" ] && extra+=(--set-string "$key.podAnnotations.neuronetes\.io/image-digest=$d")
done

log "helm upgrade --install $RELEASE into $NAMESPACE"
# shellcheck disable=SC2086
"$HELM" upgrade --install "$RELEASE" "$CHART" --kubeconfig "$KUBECONFIG_FILE" \
	--namespace "$NAMESPACE" --create-namespace \
	-f deploy/helm/values/local.yaml --set "redis.address=redis.$NAMESPACE.svc.cluster.local:6379" \
	--set "nodeagent.checkpoint.containerdSocket=$ROOT/.local/containerd/containerd.sock" "${extra[@]}" ${HELM_ARGS:-} \
	--wait --timeout "$HELM_TIMEOUT"
"$KUBECTL" --kubeconfig "$KUBECONFIG_FILE" -n "$NAMESPACE" get daemonset,deployment,pods -o wide
log "ready: kubectl --kubeconfig .local/kubeconfig get resourceslices"
