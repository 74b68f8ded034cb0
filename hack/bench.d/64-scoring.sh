#!/usr/bin/env bash
# Scoring benchmark (issue 33, "Scoring quality"): the same workloads (e2e/scoring scenarios
# "fleet" and "burst": 48 nodes in 3 zones, 40 % spot, price annotations; six models, three of
# them warm on 6 nodes each, three warm nowhere; 144 replicas of 2 GPUs whose pods prefer their
# model's warm nodes, as the controller renders them, arriving in interleaved batches) placed by
# the default scheduler and by neuronetes-scheduler's "neuronetes" profile (deploy/scheduler).
# Prints $ per placed replica-hour, share on warm nodes (and the most possible, and replicas on
# other models' warm nodes), same-pool collisions, zone skew and spot allocation for both, each
# scenario's verdict (cost lower, warm share higher, spread kept), the overall verdict last; exits
# 1 when either part misses. Scenario "gangs" (same nodes labelled into 3 blocks of 4 racks, 48
# single replicas then 12 gangs of 8 pods through PodGroups) also prints the share of gangs in one
# node/rack/block and the mean racks per gang, and is judged on those: more gangs in one rack and
# fewer racks per gang than the default scheduler.
#
# 1. Simulation: the real scheduler framework on a fake clientset (hack/tools/scheduler
#    TestScoringSimulation; no cluster, ~15 s warm).
# 2. Live: the same scenarios on kwok nodes of the local cluster (e2e/cmd/scoring-bench), with
#    neuronetes-scheduler running as a process. Brings the local cluster up when it is not running
#    (run it under the cluster lock); deletes every node, namespace and pod it creates and stops
#    the scheduler it starts. NEURONETES_SCORING_SIM_ONLY=1 skips it (and says so).
#
# Env: NEURONETES_SCORING_ARGS extra flags for e2e/cmd/scoring-bench (-scenarios fleet,burst,gangs
# by default); SCORING_SIM_SCENARIO the simulation's scenarios (fleet,burst,gangs by default).
set -uo pipefail
echo "== simulation (hack/tools/scheduler TestScoringSimulation)"
(cd hack/tools/scheduler && go test -count=1 -run '^TestScoringSimulation$' -v . 2>&1) |
  grep -vE '^[EIW][0-9]{4} |^=== RUN'
sim=${PIPESTATUS[0]}
live=skipped
if [ "${NEURONETES_SCORING_SIM_ONLY:-}" = 1 ]; then
  echo "== live: skipped (NEURONETES_SCORING_SIM_ONLY=1)"
else
  echo "== live (local cluster, kwok nodes)"
  live=0
  bin=.local/bench/scoring-bench
  mkdir -p .local/bench
  if bash hack/build-tools.sh neuronetes-scheduler && go build -o "$bin" ./e2e/cmd/scoring-bench; then
    # shellcheck disable=SC2086 # word splitting of the extra flags is intended
    "$bin" -root . ${NEURONETES_SCORING_ARGS:-} || live=$?
  else
    echo "scoring bench: building neuronetes-scheduler or scoring-bench failed"
    live=1
  fi
fi
if [ "$sim" = 0 ] && { [ "$live" = 0 ] || [ "$live" = skipped ]; }; then
  echo "scoring: VERDICT: PASS (simulation exit $sim, live $live)"
  exit 0
fi
echo "scoring: VERDICT: FAIL (simulation exit $sim, live $live)"
exit 1
