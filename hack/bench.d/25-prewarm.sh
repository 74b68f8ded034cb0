#!/usr/bin/env bash
# Prewarm benchmark (run by `make bench`, cwd = repo root).
#
# Warms a >= 2 GiB weights file from a cold page cache with the node agent's warmer
# (parallel MADV_POPULATE_READ, and parallel pread) and compares it in the same run with
# `dd bs=16M` (single stream) and `fio` (libaio, QD16, O_DIRECT). Then measures what warming buys an
# agent: the time for a reader like cmd/demo-agent to read its weights cold versus warm.
# Prints medians of PREWARM_RUNS runs. Needs root (drop_caches) and fio. Target (the node agent's
# default warm, MADV_POPULATE_READ): >= 1.2x dd and >= 0.9x fio. The verdict is the last line: exit 0
# when met, 1 when missed, 2 when it could not be measured.
#
# Env: PREWARM_SIZE_MIB (default 2048), PREWARM_RUNS (default 3), PREWARM_DIR (default .local/bench/prewarm),
#      PREWARM_PARALLEL (default 4).
set -euo pipefail

SIZE_MIB="${PREWARM_SIZE_MIB:-2048}"
RUNS="${PREWARM_RUNS:-3}"
DIR="${PREWARM_DIR:-.local/bench/prewarm}"
PAR="${PREWARM_PARALLEL:-4}"

if [[ $(id -u) -ne 0 ]]; then echo "25-prewarm verdict: NOT MEASURED: needs root to drop the page cache"; exit 2; fi
if ! command -v fio >/dev/null; then echo "25-prewarm verdict: NOT MEASURED: fio not installed (hack/install-deps.sh)"; exit 2; fi

mkdir -p "$DIR"
BIN="$DIR/nodeagent"
go build -o "$BIN" ./cmd/nodeagent
FILE="$DIR/weights-${SIZE_MIB}m.bin"
if [[ ! -f "$FILE" || $(stat -c %s "$FILE") -ne $((SIZE_MIB << 20)) ]]; then
  echo "25-prewarm: writing ${SIZE_MIB} MiB test file $FILE"
  head -c "$((SIZE_MIB << 20))" /dev/urandom >"$FILE.tmp" && mv "$FILE.tmp" "$FILE"
fi
BYTES=$(stat -c %s "$FILE")

drop() { sync; echo 3 >/proc/sys/vm/drop_caches; }
now() { date +%s.%N; }
# timed CMD...: runs CMD from a cold page cache, prints wall seconds.
timed() {
  drop
  local t0 t1
  t0=$(now); "$@" >/dev/null 2>&1; t1=$(now)
  awk -v a="$t0" -v b="$t1" 'BEGIN {print b - a}'
}
median() { sort -g | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }

declare -A T
methods=(dd fio populate pread)
for ((r = 1; r <= RUNS; r++)); do
  # Rotate the order so that no method always runs right after another.
  for ((i = 0; i < ${#methods[@]}; i++)); do
    m=${methods[$(((i + r) % ${#methods[@]}))]}
    case $m in
      dd) s=$(timed dd if="$FILE" of=/dev/null bs=16M) ;;
      fio) s=$(timed fio --name=prewarm --filename="$FILE" --readonly --rw=read --bs=1M --ioengine=libaio --iodepth=16 --direct=1 --size="$BYTES" --output=/dev/null) ;;
      populate) s=$(timed "$BIN" warm -method populate -parallel "$PAR" "$FILE") ;;
      pread) s=$(timed "$BIN" warm -method pread -parallel "$PAR" "$FILE") ;;
    esac
    T[$m]+="$s "
  done
done
# Sanity: a warm really leaves the file resident.
drop; "$BIN" warm -method populate -parallel "$PAR" "$FILE" >/dev/null
resident=$("$BIN" resident "$FILE" | awk '{print $3}')

declare -A MED
for m in "${methods[@]}"; do MED[$m]=$(echo "${T[$m]}" | tr ' ' '\n' | grep . | median); done

printf '\n25-prewarm: cold page cache -> %d MiB, medians of %d runs (wall seconds incl. process start)\n' "$SIZE_MIB" "$RUNS"
printf '%-34s %9s %9s %9s %9s\n' method median_s GB/s vs_dd vs_fio
for m in "${methods[@]}"; do
  case $m in
    dd) label="dd bs=16M (baseline)" ;;
    fio) label="fio libaio QD16 direct (baseline)" ;;
    populate) label="nodeagent MADV_POPULATE_READ x$PAR" ;;
    pread) label="nodeagent pread x$PAR" ;;
  esac
  awk -v l="$label" -v s="${MED[$m]}" -v b="$BYTES" -v dd="${MED[dd]}" -v fio="${MED[fio]}" \
    'BEGIN {printf "%-34s %9.3f %9.2f %8.2fx %8.2fx\n", l, s, b/s/1e9, dd/s, fio/s}'
done
printf 'runs (s): dd [%s] fio [%s] populate [%s] pread [%s]\n' "${T[dd]% }" "${T[fio]% }" "${T[populate]% }" "${T[pread]% }"
printf 'resident fraction after warm: %s\n' "$resident"

# Warm-start benefit: the agent's weight read (4 MiB sequential reads, as cmd/demo-agent does) cold
# versus after the node agent warmed the file.
cold=() warmr=()
for ((r = 1; r <= RUNS; r++)); do
  drop
  cold+=("$("$BIN" read-weights "$FILE" | awk '{print $2}')")
  drop
  "$BIN" warm -method populate -parallel "$PAR" "$FILE" >/dev/null
  warmr+=("$("$BIN" read-weights "$FILE" | awk '{print $2}')")
done
mc=$(printf '%s\n' "${cold[@]}" | median)
mw=$(printf '%s\n' "${warmr[@]}" | median)
printf '\nagent weight read (%d MiB), medians of %d runs\n' "$SIZE_MIB" "$RUNS"
awk -v c="$mc" -v w="$mw" 'BEGIN {printf "%-34s %9.3f\n%-34s %9.3f\n%-34s %8.1fx\n", "cold page cache (s)", c, "after nodeagent warm (s)", w, "speed-up", c/w}'
printf 'runs (s): cold [%s] warm [%s]\n' "${cold[*]}" "${warmr[*]}"

# Verdict (last): the default warm method against both baselines of this run.
read -r vdd vfio < <(awk -v p="${MED[populate]}" -v dd="${MED[dd]}" -v fio="${MED[fio]}" 'BEGIN {printf "%.2f %.2f\n", dd/p, fio/p}')
if awk -v a="$vdd" -v b="$vfio" 'BEGIN {exit !(a >= 1.2 && b >= 0.9)}'; then
  echo "25-prewarm verdict: MET: MADV_POPULATE_READ x$PAR ${vdd}x dd (>= 1.2x), ${vfio}x fio (>= 0.9x)"
else
  echo "25-prewarm verdict: NOT MET: MADV_POPULATE_READ x$PAR ${vdd}x dd (>= 1.2x), ${vfio}x fio (>= 0.9x)"
  exit 1
fi
