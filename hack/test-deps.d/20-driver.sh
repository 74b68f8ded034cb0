#!/usr/bin/env bash
# DRA GPU driver: go-nvml needs cgo, so the driver's tests need a C compiler and libc headers; the
# e2e test image that answers like `nvidia-smi -L` (e2e/cmd/nvsmi, run by NVIDIA's specs as
# `bash -c ...`) needs a static shell: busybox-static. Idempotent and cheap when both are present.
set -euo pipefail
pkgs=()
if ! command -v gcc >/dev/null 2>&1 || [[ ! -e /usr/include/stdio.h ]]; then
  pkgs+=(gcc libc6-dev)
fi
if [[ ! -x /bin/busybox ]] || ! file -L /bin/busybox 2>/dev/null | grep -q 'statically linked'; then
  pkgs+=(busybox-static)
fi
if [[ ${#pkgs[@]} -eq 0 ]]; then
  echo "20-driver: gcc and busybox-static present"
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq "${pkgs[@]}" >/dev/null
echo "20-driver: installed ${pkgs[*]}"
