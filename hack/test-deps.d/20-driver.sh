#!/usr/bin/env bash
# DRA GPU driver: go-nvml needs cgo, so the driver's tests need a C compiler and libc headers.
# Idempotent and cheap when gcc is present.
set -euo pipefail
if command -v gcc >/dev/null 2>&1 && [[ -e /usr/include/stdio.h ]]; then
  echo "20-driver: gcc present"
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq gcc libc6-dev >/dev/null
echo "20-driver: installed gcc and libc6-dev"
