#!/usr/bin/env bash
# Dispatcher benchmark (run by `make bench` from the repo root; docs/dispatcher.md, "Benchmark"):
# messages/s and per-message latency (publish to result) through the dispatcher and the gateway,
# against a bare consumer that uses the same broker clients and calls the pool's pods directly,
# and the same bare consumer through the gateway, in the same run, for NATS JetStream (embedded
# nats-server) and Kafka (kfake, in process). Target: dispatcher throughput >= 0.8x the bare
# consumer's. Demo agents, the gateway, the dispatcher and redis-server run as processes on
# loopback. The verdict is printed last; exit 1 when a target is missed, 2 when nothing could be
# measured (a missing redis-server is not a pass).
# Knobs: NN_BENCH_ARGS (more dispatch-bench flags, e.g. "-rounds 3 -messages 3000"; see
# `dispatch-bench -h`).
set -euo pipefail
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
for cmd in demo-agent gateway dispatcher dispatch-bench; do
  go build -o "$out/$cmd" "./cmd/$cmd"
done
echo "== dispatcher bench (load $(cut -d' ' -f1-3 /proc/loadavg)) =="
# shellcheck disable=SC2086 # NN_BENCH_ARGS is a list of flags
"$out/dispatch-bench" -agent-bin "$out/demo-agent" -gateway-bin "$out/gateway" -dispatcher-bin "$out/dispatcher" \
  -logdir "$out" ${NN_BENCH_ARGS:-}
