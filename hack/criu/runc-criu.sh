#!/bin/sh
# runc-criu.sh is runc with --criu pointing at the project's CRIU wrapper
# (.local/bin/criu), for containerd's runc runtime option BinaryName, so
# container checkpoint/restore works without criu on containerd's PATH.
self=$(readlink -f "$0")
root=$(cd "$(dirname "$self")/../.." && pwd)
exec "${NN_RUNC:-runc}" --criu "${NN_CRIU:-$root/.local/bin/criu}" "$@"
