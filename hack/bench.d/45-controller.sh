#!/usr/bin/env bash
# Warm-pool activation versus cold pod start on the local real cluster: scale an AgentPool from 1 to
# 2 serving Ready pods, with and without a warm pool; prints medians and the cold/warm ratio.
# Env: NEURONETES_BENCH_ROUNDS (default 5). Skips when the cluster is not running (no kubeconfig).
set -euo pipefail
if [ ! -s .local/kubeconfig ]; then
	echo "controller bench: skipped (local cluster not running: no .local/kubeconfig)"
	exit 0
fi
NEURONETES_E2E=1 NEURONETES_E2E_KEEP=1 NEURONETES_BENCH=1 go test -count=1 -timeout 15m \
	-run '^TestControllerBenchWarmVsCold$' ./e2e/ -v 2>&1 | grep -E '^(controller bench|  |--- |FAIL|ok|panic)'
