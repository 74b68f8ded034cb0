#!/usr/bin/env bash
# Guardrail benchmarks (run by `make bench` from the repo root; docs/guardrails.md, "Benchmarks"):
#  - PII precision and recall per entity type on the labelled set generated from Presidio-research
#    sentence templates (MIT) and NeuroNetes decoys, with a fresh seed each run (printed).
#    Target: >= 0.95 for the checksum-validated types (CREDIT_CARD, IBAN_CODE).
#  - request latency through cmd/gateway (static-backends mode, one demo agent) with the built-in
#    chain against the same gateway without guardrails, in the same run, requests interleaved, for
#    1, 8 and 32 KiB prompts; once with the demo agent's model-server timing (the verdict) and
#    once with an instant backend (the gateway's own cost, reported); plus the chain's cost in
#    process. Target: median latency ratio <= 1.1x at 8 KiB.
# The verdict is printed last; the exit status is non-zero when a target is missed.
# Knobs: NN_GUARD_BENCH_ARGS (more guard-bench flags, e.g. "-requests 50 -seed 7 -only pii").
set -euo pipefail
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
for cmd in demo-agent gateway guard-bench; do
  CGO_ENABLED=0 go build -o "$out/$cmd" "./cmd/$cmd"
done
echo "== guard bench =="
# shellcheck disable=SC2086 # NN_GUARD_BENCH_ARGS is a list of flags
"$out/guard-bench" -agent-bin "$out/demo-agent" -gateway-bin "$out/gateway" -logdir "$out" ${NN_GUARD_BENCH_ARGS:-}
