#!/usr/bin/env bash
# DRA GPU driver: NodePrepareResources p50/p99 over the plugin's gRPC socket for a whole-GPU claim
# and a dynamic MIG claim (mock:dgxh100), as ratios to an fsync'ed 4 KiB write measured in the same
# run on the same disk (target: prepare p50 <= 3x), then where the time goes: each step of the
# prepare path (API GET, gRPC hop, checkpoint load/save/intent, CDI write, NVML) timed alone in a
# second pass with its own baseline. Run from the repo root.
# Env: DRIVER_BENCH_N (samples per scenario, default 400), DRIVER_BENCH_DIR (disk under test).
set -euo pipefail
N="${DRIVER_BENCH_N:-400}"
DIR="${DRIVER_BENCH_DIR:-.local/bench/driver}"
mkdir -p .local/bin
CGO_CFLAGS="${CGO_CFLAGS:--Wno-deprecated-declarations}" go build -o .local/bin/driver-bench ./cmd/driver-bench
# The default save (a slot overwritten in place), then --checkpoint-in-place=false (temp file +
# fsync + rename on every save); each run has its own baseline.
.local/bin/driver-bench -n "${N}" -dir "${DIR}" 2>/dev/null
echo
.local/bin/driver-bench -n "${N}" -dir "${DIR}" -checkpoint-in-place=false -breakdown=false 2>/dev/null
