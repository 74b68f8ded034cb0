#!/usr/bin/env bash
# Trace-driven autoscaling benchmark: NeuroNetes vs HPA, KEDA, Knative KPA,
# AIBrix APA and a future-knowing oracle, one table and one SVG plot per trace.
# Run from the repository root (make bench / make bench-autoscale).
# Env: TRACE_DIR (default ../shared/data/traces), OUT (default .local/bench/autoscale),
#      AUTOSCALE_SIM_FLAGS (extra flags, e.g. "--max-duration 20m --cold-start 30s").
set -euo pipefail
TRACE_DIR=${TRACE_DIR:-../shared/data/traces}
OUT=${OUT:-.local/bench/autoscale}
mkdir -p "$OUT"
traces=()
for f in AzureLLMInferenceTrace_code.csv AzureLLMInferenceTrace_conv.csv \
	mooncake_conversation_trace.jsonl mooncake_synthetic_trace.jsonl; do
	if [[ -f "$TRACE_DIR/$f" ]]; then
		traces+=("$TRACE_DIR/$f")
	else
		echo "40-autoscale: skipping $f: not found in $TRACE_DIR"
	fi
done
if [[ ${#traces[@]} -eq 0 ]]; then
	echo "40-autoscale: no traces found in $TRACE_DIR; nothing to run"
	exit 0
fi
bin="$OUT/autoscale-sim"
go build -o "$bin" ./cmd/autoscale-sim
list=$(IFS=,; echo "${traces[*]}")
# shellcheck disable=SC2086
"$bin" --trace "$list" --out "$OUT" ${AUTOSCALE_SIM_FLAGS:-}
echo "40-autoscale: plots in $OUT"
