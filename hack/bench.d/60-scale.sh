#!/usr/bin/env bash
# Scheduler scale benchmark (issue 9): kwok GPU nodes (driver NVML mock dgxh100, 8 GPUs) carrying the
# DRA driver's own ResourceSlices, >= 1,000 pods with pre-created claims (NVLink pairs, whole GPUs,
# MIG 3g, MIG 1g), measured through the real kube-scheduler's metrics. Prints a table per layout and
# the ratios against the whole-GPU baseline on the same nodes and of mig-demand against nvidia-dynamic
# (the slices NVIDIA's DRA driver publishes; issue 33: <= 1.0x), then the verdicts last: the
# demand-shaped layout's (mig-demand: MIG profiles read from the cluster's requests, as the driver's
# --mig-demand publishes them) MIG-claim scheduling-algorithm p99 <= 1.5x the baseline's and <= 1.0x
# nvidia-dynamic's; exits 1
# when it is missed. Absolute times are reported, not judged.
# Brings the local cluster up when it is not running; deletes every node, slice, claim and pod it
# creates. Run from the repository root.
#
# Env (defaults: 3-6 min on the shared 2-core VM; 500 nodes ~6 min, 1000 nodes ~10 min; docs/scale.md):
#   NEURONETES_SCALE_NODES    node counts, comma-separated (default 150; e.g. 500,1000)
#   NEURONETES_SCALE_PODS     pods per run (default 1000)
#   NEURONETES_SCALE_LAYOUTS  layouts, baseline first (default whole,mig-selected,mig-demand,nvidia-dynamic; add
#                             mig-mixed for MIG on 4 of 8 GPUs, mig-all for every profile)
#   NEURONETES_SCALE_ARGS     extra flags for e2e/cmd/scale-bench (e.g. -strict)
set -euo pipefail
bin=.local/bench/scale-bench
mkdir -p .local/bench
go build -o "$bin" ./e2e/cmd/scale-bench
exec "$bin" -root . \
	-nodes "${NEURONETES_SCALE_NODES:-150}" \
	-pods "${NEURONETES_SCALE_PODS:-1000}" \
	-layouts "${NEURONETES_SCALE_LAYOUTS:-whole,mig-selected,mig-demand,nvidia-dynamic}" \
	${NEURONETES_SCALE_ARGS:-}
