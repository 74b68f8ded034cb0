#!/bin/sh
# 50-checkpoint.sh: checkpoint/restore benchmarks (medians and ratios against
# baselines measured in the same run), see checkpoint/internal/ckptbench.
#   CKPT_BENCH_MIB   process RSS / weights size in MiB (default 1024)
#   CKPT_BENCH_REPS  repetitions per measurement (default 3)
#   CKPT_BENCH_ONLY  run one measurement: dump, recheckpoint or restore
#   CKPT_BENCH_WORK  work directory (default: a dir on /dev/shm, tmpfs, as the
#                    node agent uses for image staging)
# Needs root and a working CRIU (hack/test-deps.d/30-criu.sh); prints SKIP otherwise.
set -eu
mib=${CKPT_BENCH_MIB:-1024}
reps=${CKPT_BENCH_REPS:-3}
if [ "$(id -u)" != 0 ]; then
	echo "SKIP checkpoint benchmarks: need root for CRIU"
	exit 0
fi
bin=$(mktemp -d)
work=${CKPT_BENCH_WORK:-$(mktemp -d /dev/shm/ckptbench.XXXXXX)}
trap 'rm -rf "$bin" "$work"' EXIT
go build -o "$bin/ckptbench" ./checkpoint/internal/ckptbench
"$bin/ckptbench" -mib "$mib" -reps "$reps" -work "$work" ${CKPT_BENCH_ONLY:+-only "$CKPT_BENCH_ONLY"}
