#!/usr/bin/env bash
# Trace-driven autoscaling benchmark: NeuroNetes' adaptive autoscaler against
# the implementable reference (the oracle's rule fed only the past, with one
# setting tuned on the other real traces), the hindsight reference (the same
# rule tuned on the trace itself: regret), HPA, KEDA, Knative KPA, AIBrix APA
# and a future-knowing oracle; one table, one trace verdict and one PNG plot
# per trace, a summary table, one line each for the tuning set (the real
# traces) and the held-out traces (the others), a "missing" line per target
# missed (which trace, which target, by how much), the overall verdict last.
# Run from the repository root (make bench / make bench-autoscale).
# Exit status: 0 every target met, 1 a target missed, 2 a trace missing or
# unreadable (never a skip).
# Env: TRACE (comma-separated files, .csv Azure or .jsonl Mooncake, or
#      synthetic:<dip|ramp|burst|diurnal>[:<seed>[:<minutes>]]; default: the
#      four traces in TRACE_DIR and synthetic seeds 2-10, one shape each, in
#      the order dip, ramp, burst, diurnal by seed mod 4), TRACE_DIR (default
#      ../shared/data/traces; its four real traces are also the tuning set of
#      the implementable reference, each left out when it is scored),
#      OUT (default .local/bench/autoscale),
#      AUTOSCALE_SIM_FLAGS (extra flags, e.g. "--max-duration 20m --cold-start 30s").
set -euo pipefail
TRACE_DIR=${TRACE_DIR:-../shared/data/traces}
OUT=${OUT:-.local/bench/autoscale}
real=()
for f in AzureLLMInferenceTrace_code.csv AzureLLMInferenceTrace_conv.csv \
	mooncake_conversation_trace.jsonl mooncake_synthetic_trace.jsonl; do
	real+=("$TRACE_DIR/$f")
done
TUNE=$(IFS=,; echo "${real[*]}")
if [[ -z ${TRACE:-} ]]; then
	traces=("${real[@]}")
	kinds=(dip ramp burst diurnal)
	for seed in 2 3 4 5 6 7 8 9 10; do
		traces+=("synthetic:${kinds[seed % 4]}:$seed")
	done
	TRACE=$(IFS=,; echo "${traces[*]}")
fi
missing=()
IFS=, read -ra specs <<<"$TRACE,$TUNE"
for t in "${specs[@]}"; do
	if [[ $t != synthetic:* && ! -f $t ]]; then
		missing+=("$t")
	fi
done
if [[ ${#missing[@]} -gt 0 ]]; then
	echo "40-autoscale: trace not found: ${missing[*]}"
	echo "verdict: NOT MET: ${#missing[@]} trace(s) missing"
	exit 2
fi
mkdir -p "$OUT"
bin="$OUT/autoscale-sim"
go build -o "$bin" ./cmd/autoscale-sim
echo "40-autoscale: load $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) CPUs; plots in $OUT"
# The simulator prints the verdict last and exits non-zero when a target is missed.
# shellcheck disable=SC2086
exec "$bin" --trace "$TRACE" --tune "$TUNE" --out "$OUT" ${AUTOSCALE_SIM_FLAGS:-}
