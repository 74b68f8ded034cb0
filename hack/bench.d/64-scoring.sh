#!/usr/bin/env bash
# Scoring benchmark (issue 33, "Scoring quality"): the same workload (pools of 2-GPU replicas whose
# pods prefer their model's warm nodes, as the controller renders them) placed by the default
# scheduler and by neuronetes-scheduler's "neuronetes" profile (deploy/scheduler) on the same kwok
# nodes (3 zones, 40 % spot, price annotations, warm-model labels), one after the other in one
# run. Prints $ per placed replica-hour, share on warm nodes, same-pool collisions, zone skew and
# spot allocation for both, the verdict last (cost lower, warm share higher, spread kept); exits
# 1 on a miss. Brings the local cluster up when it is not running (run it under the cluster lock);
# deletes every node, namespace and pod it creates and stops the scheduler it starts.
#
# Env: NEURONETES_SCORING_ARGS extra flags for e2e/cmd/scoring-bench (-nodes 48 -pools 3
# -replicas 40 by default).
#
# First the same comparison in the scheduler framework on a fake clientset (no cluster:
# hack/tools/scheduler TestScoringSimulation); its table is printed, the live run's verdict is
# the one printed last.
set -euo pipefail
echo "== simulation (hack/tools/scheduler TestScoringSimulation)"
(cd hack/tools/scheduler && go test -count=1 -run '^TestScoringSimulation$' -v . 2>&1 | grep -vE '^[EIW][0-9]{4} ' | grep -E '^(metric|placed|\$|on warm|same-pool|zone skew|spot)|verdict|^(---|ok|FAIL)') || true
echo "== live (local cluster, kwok nodes)"
bash hack/build-tools.sh neuronetes-scheduler
bin=.local/bench/scoring-bench
mkdir -p .local/bench
go build -o "$bin" ./e2e/cmd/scoring-bench
exec "$bin" -root . ${NEURONETES_SCORING_ARGS:-}
