#!/usr/bin/env bash
# AgentSession density on the local real cluster's one node (e2e TestAgentSessionBenchDensity):
# N sessions (NEURONETES_BENCH_DENSITY_SESSIONS, default 20) of the demo agent with S MiB of state
# (NEURONETES_BENCH_DENSITY_STATE_MIB, default 128), a tenth active at a time: started in waves of
# N/10, each suspended by its idle timeout before the next wave, then resumed twice in waves (state
# checked by SHA-256 each time). Prints the peak resident memory of the node's containers against
# the state of a tenth and of all N, the checkpoint store's bytes, and the N this node would hold
# at that state size (issue "agent sessions", Density: "report N for the local node").
# The verdict is the last line: exit 0 when the peak stayed within twice the state of a tenth and
# every state came back intact, 1 when not, 2 when it could not be measured (no local cluster:
# `make cluster-up` first). Not part of `make e2e`.
set -euo pipefail
if [ ! -s .local/kubeconfig ]; then
	echo "48-session-density verdict: NOT MEASURED: the local cluster is not running (no .local/kubeconfig; make cluster-up)"
	exit 2
fi
out=$(mktemp)
trap 'rm -f "$out"' EXIT
rc=0
NEURONETES_E2E=1 NEURONETES_E2E_KEEP=1 NEURONETES_BENCH=1 go test -count=1 -timeout 30m \
	-run '^TestAgentSessionBenchDensity$' ./e2e/ -v >"$out" 2>&1 || rc=$?
grep -E '^(density: |\s+session_(density|bench)_test.go|--- |FAIL|ok|panic)' "$out" || true
line=$(grep '^session density result:' "$out" || true)
if [ -z "$line" ]; then
	echo "48-session-density verdict: NOT MEASURED: the benchmark test failed before its result (exit $rc)"
	exit 2
fi
node_n=$(sed -n 's/.* node_n=\([0-9]*\).*/\1/p' <<<"$line")
if [ "$rc" -ne 0 ]; then
	echo "48-session-density verdict: NOT MET: ${line#session density result: } (lines above)"
	exit 1
fi
echo "48-session-density verdict: MET: a tenth active at a time ran within twice a tenth's state, every state intact; N for this node: ${node_n} (${line#session density result: })"
