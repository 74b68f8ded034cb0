#!/usr/bin/env bash
# Trace-driven autoscaling benchmark: NeuroNetes' adaptive autoscaler against
# the causal reference (the oracle's rule fed only the past), HPA, KEDA,
# Knative KPA, AIBrix APA and a future-knowing oracle; one table, one trace
# verdict and one PNG plot per trace, the overall verdict printed last.
# Run from the repository root (make bench / make bench-autoscale).
# Exit status: 0 every target met, 1 a target missed, 2 a trace missing or
# unreadable (never a skip).
# Env: TRACE (comma-separated files, .csv Azure or .jsonl Mooncake, or
#      synthetic:<dip|ramp|burst|diurnal>[:<seed>[:<minutes>]]; default: the
#      four traces in TRACE_DIR), TRACE_DIR (default ../shared/data/traces),
#      OUT (default .local/bench/autoscale),
#      AUTOSCALE_SIM_FLAGS (extra flags, e.g. "--max-duration 20m --cold-start 30s").
set -euo pipefail
TRACE_DIR=${TRACE_DIR:-../shared/data/traces}
OUT=${OUT:-.local/bench/autoscale}
if [[ -z ${TRACE:-} ]]; then
	traces=()
	for f in AzureLLMInferenceTrace_code.csv AzureLLMInferenceTrace_conv.csv \
		mooncake_conversation_trace.jsonl mooncake_synthetic_trace.jsonl; do
		traces+=("$TRACE_DIR/$f")
	done
	TRACE=$(IFS=,; echo "${traces[*]}")
fi
missing=()
IFS=, read -ra specs <<<"$TRACE"
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
exec "$bin" --trace "$TRACE" --out "$OUT" ${AUTOSCALE_SIM_FLAGS:-}
