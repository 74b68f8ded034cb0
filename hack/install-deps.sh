#!/usr/bin/env bash
# install-deps.sh installs the Debian packages the local cluster and the tests
# need, only where they are missing. It is safe to run repeatedly.
set -euo pipefail

# Each entry is "command-or-path:package".
need=(
	"runc:runc"
	"/usr/lib/cni/bridge:containernetworking-plugins"
	"iptables:iptables"
	"ip:iproute2"
	"redis-server:redis-server"
	"fio:fio"
	"conntrack:conntrack"
	"valgrind:valgrind" # the gateway bench's instruction counts (callgrind, callgrind_control)
	"nft:nftables"
	"mount.nfs:nfs-common"
)
# nfs-common is the last entry.
[ "${NEURONETES_SKIP_NFS:-1}" = 1 ] && unset 'need[-1]'

missing=()
for e in "${need[@]}"; do
	probe=${e%%:*} pkg=${e#*:}
	if [[ $probe == /* ]]; then [ -e "$probe" ] && continue
	else command -v "$probe" >/dev/null 2>&1 && continue; fi
	missing+=("$pkg")
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" != 0 ]; then
	echo "install-deps: missing Debian packages ${missing[*]}; run as root or install them" >&2
	exit 1
fi
echo "install-deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
# Debian starts redis-server as a service on install; the tests run their own.
# Only the package's own instance is stopped (by its pid file), never another redis-server.
if command -v service >/dev/null 2>&1; then service redis-server stop >/dev/null 2>&1 || true; fi
if [ -f /run/redis/redis-server.pid ]; then kill "$(cat /run/redis/redis-server.pid)" 2>/dev/null || true; fi
