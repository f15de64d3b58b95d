#!/usr/bin/env bash
# Build the local test images (no registry is reachable, so nothing can be pulled):
#   netplugin-test/busybox  static busybox with all its applets (ip, ping, nc, wget, udhcpc,
#                           sleep, httpd, ...), a minimal /etc, and a udhcpc default script
#   netplugin-test/iperf    the busybox tree plus the host's /usr/bin/iperf3 and its libs
#
# Usage: scripts/test-image.sh [busybox|iperf|all] [--force]
# Idempotent: an image already built from this recipe is kept; --force rebuilds it.
# Needs a running dockerd (scripts/host-daemons.sh) and busybox-static (iperf3 for iperf).
set -euo pipefail

# Bump when the recipe changes: images with another label are rebuilt.
RECIPE=3
BUSYBOX_IMAGE=${BUSYBOX_IMAGE:-netplugin-test/busybox}
IPERF_IMAGE=${IPERF_IMAGE:-netplugin-test/iperf}
BUSYBOX=${BUSYBOX:-/bin/busybox}

what=busybox
force=0
for arg in "$@"; do
  case $arg in
    busybox | iperf | all) what=$arg ;;
    --force | -f) force=1 ;;
    *)
      echo "usage: $0 [busybox|iperf|all] [--force]" >&2
      exit 2
      ;;
  esac
done

TMPDIRS=()
cleanup() { ((${#TMPDIRS[@]} == 0)) || rm -rf "${TMPDIRS[@]}"; }
trap cleanup EXIT

die() {
  echo "test-image: $*" >&2
  exit 1
}

docker info >/dev/null 2>&1 || die "docker is not answering; run scripts/host-daemons.sh first"

# True when IMAGE exists and was built from this recipe.
image_current() {
  local label
  label=$(docker image inspect -f '{{index .Config.Labels "netplugin.test-image.recipe"}}' \
    "$1" 2>/dev/null) || return 1
  [ "$label" = "$RECIPE" ]
}

# Populate DIR with busybox, its applet links and a minimal /etc.
busybox_tree() {
  local dir=$1 applet
  # A dynamically linked busybox would need its libs too: insist on the static one.
  [ -x "$BUSYBOX" ] || die "$BUSYBOX missing (apt-get install busybox-static)"
  if ldd "$BUSYBOX" >/dev/null 2>&1; then
    die "$BUSYBOX is dynamically linked; install busybox-static"
  fi
  mkdir -p "$dir"/{bin,sbin,usr/bin,usr/sbin,etc,root,tmp,proc,sys,dev,run,var/www}
  mkdir -p "$dir/usr/share/udhcpc"
  chmod 1777 "$dir/tmp"
  cp "$BUSYBOX" "$dir/bin/busybox"
  # --list-full gives each applet's canonical path (bin/sh, sbin/ip, usr/bin/wget, ...).
  while read -r applet; do
    [ "$applet" = bin/busybox ] && continue
    [ -e "$dir/$applet" ] || ln -s /bin/busybox "$dir/$applet"
  done < <("$BUSYBOX" --list-full)
  for applet in ip ping nc wget udhcpc sleep httpd sh; do
    [ -e "$dir/bin/$applet" ] || [ -e "$dir/sbin/$applet" ] || [ -e "$dir/usr/bin/$applet" ] ||
      [ -e "$dir/usr/sbin/$applet" ] || die "busybox lacks the $applet applet"
  done
  printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' \
    >"$dir/etc/passwd"
  printf 'root:x:0:\nnogroup:x:65534:\n' >"$dir/etc/group"
  echo "netplugin test image" >"$dir/var/www/index.html"
  # udhcpc only obtains a lease; this script (its default path) applies it to the interface.
  cat >"$dir/usr/share/udhcpc/default.script" <<'EOF'
#!/bin/sh
# udhcpc event script: apply the lease (ip, subnet/mask, router, dns) to $interface.
[ -n "$1" ] || exit 1
case "$1" in
  deconfig)
    ip -4 addr flush dev "$interface"
    ip link set "$interface" up
    ;;
  bound | renew)
    ip -4 addr flush dev "$interface"
    ip addr add "$ip/${mask:-${subnet:-24}}" dev "$interface"
    ip link set "$interface" up
    if [ -n "$router" ]; then
      while ip route del default dev "$interface" 2>/dev/null; do :; done
      for r in $router; do ip route add default via "$r" dev "$interface" && break; done
    fi
    if [ -n "$dns" ]; then
      : >/etc/resolv.conf
      for d in $dns; do echo "nameserver $d" >>/etc/resolv.conf; done
    fi
    ;;
esac
exit 0
EOF
  chmod 755 "$dir/usr/share/udhcpc/default.script"
}

# Copy a dynamically linked binary and every library ldd lists (plus the loader) into DIR.
copy_with_libs() {
  local bin=$1 dir=$2 lib
  cp -L --parents "$bin" "$dir"
  # Lines look like "libx.so.1 => /lib/.../libx.so.1 (0x...)" or "/lib64/ld-linux... (0x...)".
  while read -r lib; do
    [ -n "$lib" ] && cp -L --parents "$lib" "$dir"
  done < <(ldd "$bin" | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}')
}

import_tree() { # dir image
  local old
  old=$(docker image inspect -f '{{.Id}}' "$2" 2>/dev/null || true)
  tar --numeric-owner -C "$1" -c . | docker import \
    --change "LABEL netplugin.test-image.recipe=$RECIPE" \
    --change 'ENV PATH=/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["/bin/sh"]' \
    - "$2" >/dev/null
  # Drop the image this one replaced (left untagged); kept if a container still uses it.
  if [ -n "$old" ] && [ "$old" != "$(docker image inspect -f '{{.Id}}' "$2")" ]; then
    docker rmi "$old" >/dev/null 2>&1 || true
  fi
}

build_busybox() {
  if [ "$force" = 0 ] && image_current "$BUSYBOX_IMAGE"; then
    echo "test-image: $BUSYBOX_IMAGE present"
    return
  fi
  local dir
  dir=$(mktemp -d)
  TMPDIRS+=("$dir")
  busybox_tree "$dir"
  import_tree "$dir" "$BUSYBOX_IMAGE"
  echo "test-image: built $BUSYBOX_IMAGE"
}

build_iperf() {
  if [ "$force" = 0 ] && image_current "$IPERF_IMAGE"; then
    echo "test-image: $IPERF_IMAGE present"
    return
  fi
  local iperf dir
  iperf=$(command -v iperf3) || die "iperf3 missing (apt-get install iperf3)"
  dir=$(mktemp -d)
  TMPDIRS+=("$dir")
  busybox_tree "$dir"
  copy_with_libs "$(readlink -f "$iperf")" "$dir"
  [ -e "$dir/usr/bin/iperf3" ] || ln -s "$(readlink -f "$iperf")" "$dir/usr/bin/iperf3"
  import_tree "$dir" "$IPERF_IMAGE"
  # Prove the libraries are all there before anyone relies on it.
  docker run --rm --net none "$IPERF_IMAGE" iperf3 --version >/dev/null ||
    die "$IPERF_IMAGE was built but iperf3 does not run in it"
  echo "test-image: built $IPERF_IMAGE"
}

case $what in
  busybox) build_busybox ;;
  iperf) build_iperf ;;
  all)
    build_busybox
    build_iperf
    ;;
esac
