#!/usr/bin/env bash
# Simulator fidelity on the local real cluster: e2e TestAutoscalerMatchesSimulator replays six
# minutes of the synthetic ramp through the gateway into demo agents scaled by the controller's
# adaptive loop, simulates the same requests with the same AgentPool spec and the measured cold
# start, and compares attainment (tolerance 5 points), replica-seconds (35%) and peak replicas (1).
# It passes on an idle machine and is not part of `make e2e` (CI): under the rest of the suite's
# load the live pool can spike past the simulated peak (docs/autoscaling.md, "Simulator and
# cluster"); it runs here, in `make bench`, on a quiet machine.
# The verdict is the last line: exit 0 when the test passes, 1 when it fails, 2 when it could not
# run (no local cluster: `make cluster-up` first).
set -euo pipefail
if [ ! -s .local/kubeconfig ]; then
	echo "42-autoscale-e2e verdict: NOT MEASURED: the local cluster is not running (no .local/kubeconfig; make cluster-up)"
	exit 2
fi
out=$(mktemp)
trap 'rm -f "$out"' EXIT
rc=0
NEURONETES_E2E=1 NEURONETES_E2E_KEEP=1 go test -count=1 -timeout 20m \
	-run '^TestAutoscalerMatchesSimulator$' ./e2e/ -v >"$out" 2>&1 || rc=$?
grep -E '^\s+autoscaler_sim_test.go|^(--- |FAIL|ok|panic)' "$out" || true
case $rc in
0) echo "42-autoscale-e2e verdict: MET: live and simulated attainment, replica-seconds and peak within tolerance" ;;
1) if grep -q -- '--- FAIL: TestAutoscalerMatchesSimulator' "$out"; then
	echo "42-autoscale-e2e verdict: NOT MET: the simulator and the cluster disagree beyond the tolerances (lines above)"
	exit 1
   fi
   echo "42-autoscale-e2e verdict: NOT MEASURED: the test did not run to its comparison (exit $rc)"
   exit 2 ;;
*) echo "42-autoscale-e2e verdict: NOT MEASURED: go test exit $rc"; exit 2 ;;
esac
