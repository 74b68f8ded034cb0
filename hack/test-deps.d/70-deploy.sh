#!/usr/bin/env bash
# Test prerequisites of the deploy component (deploy/helm, deploy/grafana, e2e/deploy_test.go):
# helm in .local/bin (chart lint/render tests, hack/deploy-local.sh) and redis-server (the e2e
# release's sidecars and the dashboard-metrics scrape). Idempotent and cheap when satisfied.
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ ! -x .local/bin/helm ]; then
	bash hack/build-tools.sh helm
fi
if ! command -v redis-server >/dev/null; then
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends redis-server >/dev/null
	# Only the binary is needed; the tests start private servers.
	systemctl disable --now redis-server >/dev/null 2>&1 || true
fi
echo "deploy test deps: $(.local/bin/helm version --short 2>/dev/null || echo helm?), $(redis-server --version | cut -d' ' -f3)"
