#!/bin/sh
# criu.sh runs the CRIU binary unpacked into the private prefix (default:
# <repo>/.local/criu, override with NN_CRIU_PREFIX) through the prefix's own
# dynamic loader, so the newer libc it was built against never replaces the
# host's. hack/test-deps.d/30-criu.sh installs the prefix and links
# .local/bin/criu to this script.
set -e
self=$(readlink -f "$0")
root=$(cd "$(dirname "$self")/../.." && pwd)
prefix=${NN_CRIU_PREFIX:-$root/.local/criu}
lib=$prefix/usr/lib/x86_64-linux-gnu
if [ ! -x "$prefix/usr/sbin/criu" ]; then
	echo "criu.sh: no CRIU in $prefix (run hack/test-deps.d/30-criu.sh)" >&2
	exit 127
fi
exec "$lib/ld-linux-x86-64.so.2" --library-path "$lib:$prefix/lib/x86_64-linux-gnu" "$prefix/usr/sbin/criu" "$@"
