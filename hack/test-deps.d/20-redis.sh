#!/usr/bin/env bash
# Test prerequisite of the sidecar: Debian's redis-server (the tests start and
# stop their own instances on 127.0.0.1; nothing is started here).
# Idempotent and cheap when already satisfied.
set -euo pipefail
if command -v redis-server >/dev/null 2>&1; then
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends redis-server >/dev/null
# The package enables a system service on 6379; the tests do not need it.
if command -v systemctl >/dev/null 2>&1; then
  systemctl disable --now redis-server >/dev/null 2>&1 || true
fi
command -v redis-server >/dev/null
