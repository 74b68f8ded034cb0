#!/usr/bin/env bash
# AgentSession claim from a warm pool on the local real cluster (e2e TestAgentSessionBenchClaim):
# an AgentClass with spec.sessions.warmPoolSize (pause pods), sessions created one after another
# (each once the pool is Ready again), from the create call to the session seen Running by a
# watch, beside sessions of the same template without a pool (a new pod each) in the same run.
# Prints p50 and p99 of both. Target (issue "agent sessions", Claim): claim p50 <= 100 ms and
# p99 <= 300 ms, every session in a claimed warm pod. The verdict is the last line: exit 0 when
# met, 1 when missed, 2 when it could not be measured (no local cluster: `make cluster-up`
# first). Not part of `make e2e`.
# Env: NEURONETES_BENCH_CLAIM_SESSIONS (default 30), NEURONETES_BENCH_CLAIM_POOL (default 3),
# NEURONETES_BENCH_CLAIM_COLD (default 10).
set -euo pipefail
if [ ! -s .local/kubeconfig ]; then
	echo "46-session-claim verdict: NOT MEASURED: the local cluster is not running (no .local/kubeconfig; make cluster-up)"
	exit 2
fi
out=$(mktemp)
trap 'rm -f "$out"' EXIT
rc=0
NEURONETES_E2E=1 NEURONETES_E2E_KEEP=1 NEURONETES_BENCH=1 go test -count=1 -timeout 20m \
	-run '^TestAgentSessionBenchClaim$' ./e2e/ -v >"$out" 2>&1 || rc=$?
grep -E '^(\s+session_claim_bench_test.go|--- |FAIL|ok|panic)' "$out" || true
line=$(grep '^session claim result:' "$out" || true)
if [ -z "$line" ]; then
	grep -E 'session_claim|claim_test' "$out" | tail -20 || true
	echo "46-session-claim verdict: NOT MEASURED: the benchmark test failed (exit $rc)"
	exit 2
fi
val() { sed -n "s/.* $1=\([0-9.]*\).*/\1/p" <<<"$line"; }
p50=$(val claim_p50_ms) p99=$(val claim_p99_ms) c50=$(val cold_p50_ms) c99=$(val cold_p99_ms)
claimed=$(val claimed) n=$(val sessions) cold=$(val cold_sessions) pool=$(val pool)
echo "46-session-claim: $n sessions against a warm pool of $pool: create to Running p50 ${p50} ms, p99 ${p99} ms ($claimed claimed a warm pod)"
echo "46-session-claim: $cold sessions without a pool (baseline, same run): p50 ${c50} ms, p99 ${c99} ms; claim/baseline p50 $(awk -v a="$p50" -v b="$c50" 'BEGIN { printf "%.2f", a / b }')x"
if [ "$rc" -eq 0 ] && [ "$claimed" = "$n" ] && awk -v a="$p50" -v b="$p99" 'BEGIN { exit !(a <= 100 && b <= 300) }'; then
	echo "46-session-claim verdict: MET: claim p50 ${p50} ms <= 100 ms, p99 ${p99} ms <= 300 ms"
else
	echo "46-session-claim verdict: NOT MET: claim p50 ${p50} ms (target <= 100), p99 ${p99} ms (target <= 300), $claimed of $n claimed (test exit $rc)"
	exit 1
fi
