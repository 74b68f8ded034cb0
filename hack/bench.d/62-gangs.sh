#!/usr/bin/env bash
# Gang benchmark (issue 33, the Gangs target): kwok nodes of 8 GPUs (the driver's whole-GPU
# ResourceSlices, NVML mock dgxh100) and the real kube-scheduler with the Workload API. First a
# single-pod baseline (100 pods of the gang shapes, placed alone, then deleted); then gangs of
# 4 pods x 8 GPUs and 2 pods x 4 GPUs in turn, PodGroups with a gang policy as the controller
# writes them, wanting 1.25x the cluster's GPUs, all created at once. Once no pod was newly bound
# for 20 s it counts gangs bound in part, GPUs stranded (claims allocated to pods not bound or to
# gangs not whole) and pending gangs that the free GPUs could hold (must all be 0), and reports
# gang placement latency p99 beside the single pods'. Verdict last; exits 1 on a miss.
# Brings the local cluster up when it is not running; deletes every node, slice, claim, PodGroup
# and pod it creates. Run from the repository root, under the cluster lock.
#
# Env:
#   NEURONETES_GANG_NODES  node counts, comma-separated (default 500,1000)
#   NEURONETES_GANG_ARGS   extra flags for e2e/cmd/scale-bench (e.g. -gang-overcommit 1.5)
set -euo pipefail
bin=.local/bench/scale-bench
mkdir -p .local/bench
go build -o "$bin" ./e2e/cmd/scale-bench
# -phase-timeout 15m: on the shared 2-core VM the scheduler places ~0.6 gangs/s at 1,000 nodes, so
# the ~400 placeable gangs need ~11 min (a 5 min cut judged them as pending gangs that fit).
exec "$bin" -root . -gangs -phase-timeout 15m -nodes "${NEURONETES_GANG_NODES:-500,1000}" ${NEURONETES_GANG_ARGS:-}
