#!/usr/bin/env bash
# Sidecar benchmarks (run by `make bench` from the repo root):
#  - 16 KiB session GET/PUT p50/p99 through the sidecar binary as its own
#    process (GOMAXPROCS=2, as injected), over loopback TCP and the unix
#    socket, against the out-of-process floor measured in the same run: raw
#    go-redis GET/SET plus the same-size loopback echo through a minimal
#    server (same HTTP engine) in its own process. Targets: near-cache hit
#    <= 1.1x, cache-miss GET <= 1.3x, PUT <= 1.5x of that floor at p50 and
#    p99; the levers of PUT (--compression s2/zstd/none), Go's net/http
#    client and gRPC for comparison; near-cache hit in process p99 <= 20 µs;
#  - frame sizes and seal times per codec, with and without the dictionary;
#  - vector search recall@10 and QPS vs exact brute force on 100k x 128
#    seeded clustered vectors and an embedding-like distribution (target:
#    recall >= 0.95 at >= 10x).
# The verdict is the last line: exit 0 when every target is met, 1 when one
# is missed, 2 when the run failed. Needs redis-server
# (hack/test-deps.d/20-redis.sh).
# Knobs: NN_BENCH_VECTORS (default 100000), NN_BENCH_QUERIES (500),
# NN_BENCH_ROUNDS (10), NN_BENCH_OPS (200), NN_BENCH_ONLY (sessions|vectors).
set -euo pipefail
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
CGO_ENABLED=0 go build -o "$out/sidecar-bench" ./sidecar/cmd/sidecar-bench
CGO_ENABLED=0 go build -o "$out/sidecar" ./cmd/sidecar
echo "== sidecar bench =="
"$out/sidecar-bench" -only "${NN_BENCH_ONLY:-}" -sidecar-bin "$out/sidecar"
