#!/bin/sh
# 50-checkpoint.sh: checkpoint/restore benchmarks (medians and ratios against
# baselines measured in the same run), see checkpoint/internal/ckptbench.
#   CKPT_BENCH_MIB          weights size in MiB (the process RSS; default 1024)
#   CKPT_BENCH_REPS         repetitions of the re-checkpoint and restore measurements (default 3)
#   CKPT_BENCH_DUMP_REPS    library/CLI pairs of the dump+restore comparison (default 7)
#   CKPT_BENCH_STATE_MIB    anonymous state the agent builds from its weights (default 64)
#   CKPT_BENCH_ONLY         run one measurement: dump, recheckpoint or restore
#   CKPT_BENCH_WORK         work directory for images and stores (default: a dir
#                           on /dev/shm, tmpfs, as the node agent uses for staging)
#   CKPT_BENCH_WEIGHTS_DIR  where the weights file is written (default /tmp: a
#                           disk, like the node's model cache; page-cached)
# Needs root and a working CRIU (hack/test-deps.d/30-criu.sh). The verdict is the last line:
# exit 0 when every target is met, 1 when one is missed, 2 when nothing could be measured.
set -eu
mib=${CKPT_BENCH_MIB:-1024}
reps=${CKPT_BENCH_REPS:-3}
dreps=${CKPT_BENCH_DUMP_REPS:-7}
smib=${CKPT_BENCH_STATE_MIB:-64}
wdir=${CKPT_BENCH_WEIGHTS_DIR:-/tmp}
if [ "$(id -u)" != 0 ]; then
	echo "verdict: NOT MEASURED: checkpoint benchmarks need root for CRIU"
	exit 2
fi
bin=$(mktemp -d)
work=${CKPT_BENCH_WORK:-$(mktemp -d /dev/shm/ckptbench.XXXXXX)}
trap 'rm -rf "$bin" "$work"' EXIT
go build -o "$bin/ckptbench" ./checkpoint/internal/ckptbench
"$bin/ckptbench" -mib "$mib" -reps "$reps" -dump-reps "$dreps" -state-mib "$smib" -weights-dir "$wdir" \
	-work "$work" ${CKPT_BENCH_ONLY:+-only "$CKPT_BENCH_ONLY"}
