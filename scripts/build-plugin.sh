#!/usr/bin/env bash
# make plugin: build netplugin's managed (v2) Docker plugin from this checkout and create it.
#
#   PLUGIN   the plugin's name (default netplugin:latest; REGISTRY/netplugin:TAG to push)
#   PUSH=1   docker plugin push it afterwards (to the registry its name starts with)
#   BUILD    the build directory (default build/plugin)
#
# The rootfs is a Debian minbase (debootstrap, from the host's Debian mirror; cached in
# build/ until the package list changes) with Python, iproute2 and iptables, plus this
# venv's runtime packages (pyproject's dependencies and theirs, no test tools) and the
# project's source. Nothing is pulled from an image registry.
set -euo pipefail
cd "$(dirname "$0")/.."
PLUGIN=${PLUGIN:-netplugin:latest}
BUILD=${BUILD:-build/plugin}
VENV=${VENV:-.venv}
SUITE=${SUITE:-bookworm}
MIRROR=${MIRROR:-$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)}
MIRROR=${MIRROR:-http://deb.debian.org/debian}
PACKAGES=python3-minimal,python3-venv,iproute2,iptables,ca-certificates
started=$(date +%s)

case "$PLUGIN" in *:*) ;; *) PLUGIN="$PLUGIN:latest" ;; esac
if [ "$(id -u)" != 0 ]; then echo "plugin: run as root (debootstrap, docker)" >&2; exit 1; fi
if ! command -v debootstrap >/dev/null; then
  echo "plugin: installing debootstrap"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >/dev/null
fi

# 1. The Debian base, cached by suite and package list.
key=$(printf '%s %s %s' "$SUITE" "$PACKAGES" "$(uname -m)" | sha256sum | cut -c1-12)
base=build/plugin-base-$key.tar
if [ ! -f "$base" ]; then
  echo "plugin: debootstrap $SUITE ($PACKAGES) from $MIRROR"
  tmp=$(mktemp -d build-plugin-base.XXXX -p "${TMPDIR:-/tmp}")
  trap 'rm -rf "$tmp"' EXIT
  debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$tmp" "$MIRROR" >"$tmp.log" 2>&1 || {
    tail -20 "$tmp.log" >&2; echo "plugin: debootstrap failed (log above)" >&2; exit 1; }
  rm -f "$tmp.log"
  # What a plugin never uses: docs, locales, apt's lists and caches.
  rm -rf "$tmp"/usr/share/{doc,man,info,locale} "$tmp"/var/lib/apt/lists/* "$tmp"/var/cache/apt/*
  mkdir -p build
  tar -C "$tmp" -cf "$base.part" . && mv "$base.part" "$base"
  rm -rf "$tmp"
  trap - EXIT
fi

# 2. The rootfs: the base, a venv with the runtime packages, the project's source.
rm -rf "$BUILD"
mkdir -p "$BUILD/rootfs"
rootfs=$BUILD/rootfs
tar -C "$rootfs" -xf "$base"
chroot "$rootfs" python3 -m venv --without-pip /opt/netplugin/venv
pyver=$(chroot "$rootfs" /opt/netplugin/venv/bin/python -c 'import sys; print("python%d.%d" % sys.version_info[:2])')
host_pyver=$("$VENV/bin/python" -c 'import sys; print("python%d.%d" % sys.version_info[:2])')
if [ "$pyver" != "$host_pyver" ]; then
  echo "plugin: the rootfs has $pyver but $VENV has $host_pyver: its compiled packages would not load" >&2
  exit 1
fi
site=$rootfs/opt/netplugin/venv/lib/$pyver/site-packages
host_site=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
"$VENV/bin/python" scripts/plugin_files.py >"$BUILD/files.txt"
tar -C "$host_site" -cf - -T "$BUILD/files.txt" | tar -C "$site" -xf -
rm "$BUILD/files.txt"
src=$rootfs/opt/netplugin/src
mkdir -p "$src"
tar --exclude=__pycache__ -cf - common datapath ipam master netctl plugin store | tar -C "$src" -xf -
echo /opt/netplugin/src > "$site/netplugin.pth"
version=$("$VENV/bin/python" -c 'from importlib.metadata import version; print(version("netplugin"))')
mkdir -p "$site/netplugin-$version.dist-info"
printf 'Metadata-Version: 2.1\nName: netplugin\nVersion: %s\n' "$version" \
  > "$site/netplugin-$version.dist-info/METADATA"
chroot "$rootfs" /opt/netplugin/venv/bin/python -m compileall -q -j 0 /opt/netplugin >/dev/null
# The plugin's own mount points (config.json's mounts).
mkdir -p "$rootfs"/{host/proc,host/var/lib,var/run/openvswitch,run/docker/plugins}
cp config.json "$BUILD/config.json"
size=$(du -sm "$rootfs" | cut -f1)
built=$(date +%s)

# 3. The plugin: replace an earlier one of this name (refused while it is enabled).
if docker plugin inspect "$PLUGIN" >/dev/null 2>&1; then
  if [ "$(docker plugin inspect -f '{{.Enabled}}' "$PLUGIN")" = true ]; then
    echo "plugin: $PLUGIN is enabled; disable it first (docker plugin disable $PLUGIN)" >&2
    exit 1
  fi
  docker plugin rm "$PLUGIN" >/dev/null
fi
docker plugin create "$PLUGIN" "$BUILD" >/dev/null
created=$(date +%s)
echo "plugin: created $PLUGIN (rootfs ${size} MB; build $((built - started)) s, create $((created - built)) s)"
if [ "${PUSH:-}" = 1 ]; then
  docker plugin push "$PLUGIN"
fi
echo "plugin: next: docker plugin enable $PLUGIN"
