#!/usr/bin/env bash
# AgentSession resume versus cold start on the local real cluster (e2e TestAgentSessionBenchResume):
# the demo agent with 1 GiB of in-memory state (--state-bytes), per round a cold start (a new
# session, creation to the first token of a turn through the gateway's session route, the state
# allocated and filled before it answers) and a resume (state written, the idle timeout suspends
# the session with CRIU, the next turn through the gateway is held while it resumes; sending to
# the first token, with the state's SHA-256 checked). Prints each round's stages, the medians and
# the ratio. Target (issue "agent sessions", Resume): resume median <= 0.3x the cold median.
# The verdict is the last line: exit 0 when met, 1 when missed, 2 when it could not be measured
# (no local cluster: `make cluster-up` first). Not part of `make e2e`.
# Env: NEURONETES_BENCH_ROUNDS (default 3), NEURONETES_BENCH_LAZY (0: eager CRIU restores; default
# lazy pages), NEURONETES_BENCH_WARM_HOSTS (0: no warm restore host, every resume creates its host
# pod; default: the class keeps one, which each resume must claim), NEURONETES_BENCH_LOG (a file
# that gets the test's whole output).
set -euo pipefail
if [ ! -s .local/kubeconfig ]; then
	echo "47-session-resume verdict: NOT MEASURED: the local cluster is not running (no .local/kubeconfig; make cluster-up)"
	exit 2
fi
# The node agent's store is under the test's temporary directory: each of the 3 sessions keeps up
# to 2 checkpoints of 1 GiB there. A nearly full disk shows only as a suspension that never ends.
need_kib=$((8 * 1024 * 1024))
free_kib=$(df -Pk "${TMPDIR:-/tmp}" | awk 'NR == 2 { print $4 }')
if [ "${free_kib:-0}" -lt "$need_kib" ]; then
	echo "47-session-resume verdict: NOT MEASURED: ${TMPDIR:-/tmp} has $((free_kib / 1024)) MiB free, the checkpoint store needs 8192 MiB (set TMPDIR to a larger disk)"
	exit 2
fi
out=$(mktemp)
trap 'rm -f "$out"' EXIT
rc=0
NEURONETES_E2E=1 NEURONETES_E2E_KEEP=1 NEURONETES_BENCH=1 go test -count=1 -timeout 20m \
	-run '^TestAgentSessionBenchResume$' ./e2e/ -v >"$out" 2>&1 || rc=$?
[ -n "${NEURONETES_BENCH_LOG:-}" ] && cp "$out" "$NEURONETES_BENCH_LOG"
grep -E '^(b[0-9]+ |  \+|  phase |\s+session_bench(_phases)?_test.go|--- |FAIL|ok|panic)' "$out" || true
grep -E '^session bench (budget|phase|floor|missing):' "$out" || true
read -r cold resume < <(sed -n 's/^session bench result: cold_ms=\([0-9]*\) resume_ms=\([0-9]*\) .*$/\1 \2/p' "$out") || true
if [ "$rc" -ne 0 ] || [ -z "${cold:-}" ]; then
	grep -E 'session_test.go|session_bench' "$out" | tail -20 || true
	echo "47-session-resume verdict: NOT MEASURED: the benchmark test failed (exit $rc)"
	exit 2
fi
ratio=$(awk -v r="$resume" -v c="$cold" 'BEGIN { printf "%.2f", r / c }')
echo "47-session-resume: cold start median ${cold} ms, resume median ${resume} ms, ratio ${ratio}x (1 GiB of state, checksum intact)"
if awk -v r="$resume" -v c="$cold" 'BEGIN { exit !(r <= 0.3 * c) }'; then
	echo "47-session-resume verdict: MET: resume ${resume} ms <= 0.3x cold ${cold} ms (${ratio}x)"
else
	echo "47-session-resume verdict: NOT MET: resume ${resume} ms is ${ratio}x the cold start's ${cold} ms (target <= 0.3x; stages above)"
	exit 1
fi
