#!/usr/bin/env bash
# Warm-pool activation versus cold pod start on the local real cluster: scale an AgentPool from 1 to
# 2 serving Ready pods, with and without a warm pool; prints medians and the cold/warm ratio.
# Target: the warm scale-up's median under 500 ms (seed 000's "< 500ms TTFT from cold", which warm
# pools exist to meet) and faster than the cold one measured in the same run. The verdict is the
# last line: exit 0 when met, 1 when missed, 2 when it could not be measured (no local cluster:
# `make cluster-up` first).
# Env: NEURONETES_BENCH_ROUNDS (default 5).
set -euo pipefail
if [ ! -s .local/kubeconfig ]; then
	echo "45-controller verdict: NOT MEASURED: the local cluster is not running (no .local/kubeconfig; make cluster-up)"
	exit 2
fi
out=$(mktemp)
trap 'rm -f "$out"' EXIT
rc=0
NEURONETES_E2E=1 NEURONETES_E2E_KEEP=1 NEURONETES_BENCH=1 go test -count=1 -timeout 15m \
	-run '^TestControllerBenchWarmVsCold$' ./e2e/ -v >"$out" 2>&1 || rc=$?
grep -E '^(controller bench|  |--- |FAIL|ok|panic)' "$out" | grep -v '^controller bench result:' || true
read -r warm cold < <(sed -n 's/^controller bench result: warm_ms=\([0-9]*\) cold_ms=\([0-9]*\)$/\1 \2/p' "$out") || true
if [ "$rc" -ne 0 ] || [ -z "${warm:-}" ]; then
	echo "45-controller verdict: NOT MEASURED: the benchmark test failed (exit $rc)"
	exit 2
fi
if [ "$warm" -lt 500 ] && [ "$warm" -lt "$cold" ]; then
	echo "45-controller verdict: MET: warm scale-up median ${warm} ms (< 500 ms), cold ${cold} ms"
else
	echo "45-controller verdict: NOT MET: warm scale-up median ${warm} ms (target < 500 ms and < cold ${cold} ms)"
	exit 1
fi
