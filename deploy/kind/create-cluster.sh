#!/usr/bin/env bash
# Creates a kind cluster with DRA and CDI, builds and loads the NeuroNetes images, and installs the
# chart with the mock NVML profile (deploy/helm/values/kind.yaml). Needs docker, kind, kubectl and
# helm (v3.15+ or v4) on PATH. Run from anywhere; re-running reuses the cluster.
#
#   deploy/kind/create-cluster.sh            create/reuse cluster, build+load images, install
#   deploy/kind/create-cluster.sh --delete   delete the cluster
#
# Environment: CLUSTER (neuronetes), NVML_PROFILE (mock:dgxa100), KIND_NODE_IMAGE (kind's default),
# NAMESPACE (neuronetes-system), COMPONENTS (driver nodeagent controller sidecar gateway dispatcher demo-agent: every image the chart deploys, and the demo agent).
set -euo pipefail
cd "$(dirname "$0")/../.."
CLUSTER=${CLUSTER:-neuronetes}
NVML_PROFILE=${NVML_PROFILE:-mock:dgxa100}
NAMESPACE=${NAMESPACE:-neuronetes-system}
COMPONENTS=${COMPONENTS:-driver nodeagent controller sidecar gateway dispatcher demo-agent}

if [ "${1:-}" = --delete ]; then
	exec kind delete cluster --name "$CLUSTER"
fi
for tool in docker kind kubectl helm; do
	command -v "$tool" >/dev/null || { echo "$tool is required" >&2; exit 1; }
done

if ! kind get clusters | grep -qx "$CLUSTER"; then
	kind create cluster --name "$CLUSTER" --config deploy/kind/kind-config.yaml \
		${KIND_NODE_IMAGE:+--image "$KIND_NODE_IMAGE"} --wait 120s
fi
kubectl config use-context "kind-$CLUSTER"

for c in $COMPONENTS; do
	docker build --build-arg COMPONENT="$c" -t "neuronetes.local/$c:dev" -f deploy/kind/Dockerfile .
	kind load docker-image --name "$CLUSTER" "neuronetes.local/$c:dev"
done

bash hack/deploy-local.sh --sync-crds
helm upgrade --install neuronetes deploy/helm/neuronetes --namespace "$NAMESPACE" --create-namespace \
	-f deploy/helm/values/kind.yaml --set driver.nvml="$NVML_PROFILE" --wait --timeout 5m
kubectl -n "$NAMESPACE" get pods -o wide
kubectl get resourceslices
echo "Try: kubectl create ns demo && kubectl apply -n demo -f deploy/examples/gpu-claims/01-whole-gpu.yaml"
