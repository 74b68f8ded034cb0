#!/bin/sh
# 30-criu.sh installs a working CRIU for the checkpoint tests into the private
# prefix .local/criu and links .local/bin/criu to hack/criu/criu.sh.
#
# Debian 12's criu 3.17 fails on recent kernels ("Unexpected rt vDSO area
# bounds"). Debian 13's criu 4.1.1 dumps plain processes but not TCP sockets on
# kernels >= 6.16 (SO_PASSCRED on an inet socket gives EOPNOTSUPP: "Can't get
# 1:16 opt"), so any container with a listener fails; criu 4.2.1 from Debian
# forky handles it. Its packages and the libraries it needs are downloaded with a throw-away apt configuration (a private
# sources list and package lists under a temp dir, so the host's apt sources
# are never modified), unpacked with dpkg -x into the prefix, and run through
# the prefix's own loader. Nothing is installed system-wide.
#
# Idempotent: exits at once when `criu check` through the wrapper succeeds
# and the installed version is the wanted one.
#   NN_CRIU_SUITE    Debian suite to take criu from (default forky)
#   NN_CRIU_VERSION  version prefix required of an existing install (default 4.2)
set -eu
suite=${NN_CRIU_SUITE:-forky}
want=${NN_CRIU_VERSION:-4.2}
root=$(cd "$(dirname "$0")/../.." && pwd)
prefix=$root/.local/criu
wrapper=$root/hack/criu/criu.sh
mkdir -p "$root/.local/bin"
ln -sf "$wrapper" "$root/.local/bin/criu"

if "$root/.local/bin/criu" check >/dev/null 2>&1 &&
	"$root/.local/bin/criu" --version 2>/dev/null | grep -q "^Version: $want"; then
	exit 0
fi

pkgs="criu libcompel1 libc6 libgnutls30t64 libnftables1 libnl-3-200 libprotobuf-c1 libnet1 libnet9 libbsd0
libuuid1 libmd0 libnettle8t64 libhogweed6t64 libgmp10 libidn2-0 libunistring5 libtasn1-6 libp11-kit0
libffi8 libmnl0 libnftnl11 libjansson4 libxtables12 libedit2 libtinfo6 libselinux1 libpcre2-8-0
libcap2 libgcc-s1 libzstd1 liblzma5 libz3-4 libstdc++6"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lists/partial" "$work/archives/partial" "$work/debs"
uris=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
[ -n "$uris" ] || uris=http://deb.debian.org/debian
cat >"$work/trixie.sources" <<SRC
Types: deb
URIs: $uris
Suites: $suite
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
aptopts="-o Dir::Etc::SourceList=$work/trixie.sources -o Dir::Etc::SourceParts=/nonexistent
-o Dir::State::Lists=$work/lists -o Dir::Cache::Archives=$work/archives
-o Dir::Cache::pkgcache= -o Dir::Cache::srcpkgcache= -o APT::Architecture=amd64
-o APT::Sandbox::User=root -o APT::Default-Release=$suite"
echo "30-criu: fetching criu from Debian $suite into $prefix" >&2
# shellcheck disable=SC2086
apt-get -q $aptopts update >/dev/null
cd "$work/debs"
for p in $pkgs; do
	# shellcheck disable=SC2086
	apt-get -q $aptopts download "$p" >/dev/null 2>&1 || echo "30-criu: note: no package $p in $suite" >&2
done
rm -rf "$prefix.new"
mkdir -p "$prefix.new"
for d in "$work"/debs/*.deb; do
	dpkg -x "$d" "$prefix.new"
done
rm -rf "$prefix"
mv "$prefix.new" "$prefix"
if ! out=$("$root/.local/bin/criu" check 2>&1); then
	echo "30-criu: criu check still fails after install:" >&2
	echo "$out" >&2
	exit 1
fi
echo "30-criu: $("$root/.local/bin/criu" --version | head -1): check ok" >&2
