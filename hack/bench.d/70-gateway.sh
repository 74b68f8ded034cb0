#!/usr/bin/env bash
# Gateway benchmarks (run by `make bench` and `make bench-gateway` from the repo root), one run,
# every ratio against baselines measured in the same run (docs/demo-agent.md, "Gateway
# benchmarks"):
#  - overhead: 200 concurrent streamed requests straight to 4 demo agents, through a no-op TCP
#    relay (the machine's floor for any extra process), through httputil.ReverseProxy with round
#    robin, and through cmd/gateway in its static-backends mode, in interleaved rounds: added TTFT
#    p50/p99, chunk throughput and each proxy process's CPU per chunk. Each round ends with a pair
#    window: ReverseProxy and the gateway at once, 100 streams each, so both meet the same load.
#    Then the instruction count that judges the CPU target, which machine load cannot move:
#    ReverseProxy and the gateway each run under valgrind's callgrind (GODEBUG=asyncpreemptoff=1
#    GOGC=off GOMAXPROCS=1) and stream 10 requests of 20, then of 220 tokens from one agent, both
#    at once, each phase padded to the same wall time; the instructions between the phases over
#    the chunks between are each one's user-space instructions per chunk (per-request and
#    timer-driven work cancel). Two runs, each printed with the load average, the larger ratio
#    judged; the difference is printed by function (callgrind self cost). An idle phase of the
#    same wall time comes first, so each one's instructions per request are printed too (short
#    phase less its chunks and the idle phase, by function; context, not judged), and the
#    verdict prints ReverseProxy's added TTFT p50 beside the gateway's, naming it when
#    ReverseProxy misses relay + 2 ms too, and the load a request joined on its pod (the gateway's
#    and ReverseProxy's). With NN_BENCH_ARGS="-trace-dir DIR" both processes are traced
#    (runtime/trace; the gateway's --debug-trace-file) and the bench prints, per backend request,
#    where each one's goroutines waited (backend connection, locks, response header, scheduler).
#    Targets: the gateway's instructions per chunk <= 1.0x ReverseProxy's (the process CPU time
#    per chunk in the pair windows, with user and system CPU, reads, writes and context
#    switches, is printed as context; -instr-runs 0 judges on it instead), added TTFT p50 <= the
#    TCP relay's + 2 ms, added p99 <= 2 ms only when the load average is under 1. valgrind is
#    required (hack/install-deps.sh installs it; the bench fails naming it when it is missing).
#  - routing quality: the Mooncake conversation trace replayed (time-compressed) through the
#    gateway (subscribed to the agents' KV events) and through round-robin, least-request and
#    random proxies to 4 fresh demo agents: mean/p99 TTFT and prefix-cache hit rate, measured and
#    in the model replay of each policy's decisions. Targets, on the model replay, in the default
#    window, two further ones and the held-out trace's first window: mean TTFT <= 1.15x the greedy oracle's, hit rate >= 0.95x the
#    oracle's, and >= 25% of least-request's gap to the oracle closed.
#    The gateway runs at -v=5 and logs what its picker saw for each decision; the bench sets that
#    against the model's pods and prints, per window, why decisions differ from the oracle's (the
#    load bound, a misjudged queue or own prompt, how late the decisions came) and the gateway
#    against the oracle with the requests arriving at the gateway's own decision times.
# Agents, proxies and the gateway each run as their own process on loopback. The verdict is
# printed last; the exit status is non-zero when a target is missed.
# NN_BENCH_ONLY=model runs no process: the gateway's own picker (gateway/pick) on the model's clock
# in the same windows, judged against the same targets, with its late decisions sorted by cause;
# deterministic, under a minute (what the picker's rule costs, without the machine's timing).
# NN_BENCH_ONLY=instructions runs the instruction count alone (about 2 minutes).
# Knobs: NN_BENCH_ONLY (overhead|instructions|routing|model), NN_BENCH_TRACE (the trace file), NN_BENCH_HELDOUT (a
# second trace whose first window is judged too, default the Mooncake synthetic trace; "" none), NN_BENCH_ARGS (more
# gateway-bench flags, e.g. "-trace-window 10m -rounds 1" or "-routing-policies=gateway" to replay
# only the gateway and least-request; see `gateway-bench -h`).
set -euo pipefail
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
for cmd in demo-agent gateway gateway-bench; do
  go build -o "$out/$cmd" "./cmd/$cmd"
done
echo "== gateway bench =="
# shellcheck disable=SC2086 # NN_BENCH_ARGS is a list of flags
"$out/gateway-bench" -agent-bin "$out/demo-agent" -gateway-bin "$out/gateway" -logdir "$out" \
  -trace "${NN_BENCH_TRACE:-../shared/data/traces/mooncake_conversation_trace.jsonl}" \
  -heldout-trace "${NN_BENCH_HELDOUT-../shared/data/traces/mooncake_synthetic_trace.jsonl}" \
  -only "${NN_BENCH_ONLY:-}" ${NN_BENCH_ARGS:-}
