#!/usr/bin/env bash
# Sidecar benchmarks (run by `make bench` from the repo root):
#  - 16 KiB session GET/PUT p50/p99 through the sidecar (HTTP on TCP and on
#    the unix socket, both HTTP engines, a lean HTTP client, gRPC, and
#    in-process with each codec) vs raw go-redis GET/SET of the same bytes,
#    near-cache hit latency, Redis CPU per call, and the HTTP hop alone (a
#    server answering from memory) with the floor it puts under any sidecar,
#    and the sidecar binary as its own process (as deployed in a pod);
#  - frame sizes and seal times per codec (S2, zstd), with and without the
#    JSON dictionary;
#  - vector search recall@10 and QPS vs exact brute force on 100k x 128
#    seeded clustered vectors and an embedding-like distribution.
# Every ratio is against a baseline measured in the same run. Needs
# redis-server (hack/test-deps.d/20-redis.sh).
# Knobs: NN_BENCH_VECTORS (default 100000), NN_BENCH_QUERIES (500),
# NN_BENCH_ROUNDS (10), NN_BENCH_OPS (200), NN_BENCH_ONLY (sessions|vectors).
set -euo pipefail
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
CGO_ENABLED=0 go build -o "$out/sidecar-bench" ./sidecar/cmd/sidecar-bench
CGO_ENABLED=0 go build -o "$out/sidecar" ./cmd/sidecar
echo "== sidecar bench =="
"$out/sidecar-bench" -only "${NN_BENCH_ONLY:-}" -sidecar-bin "$out/sidecar"
