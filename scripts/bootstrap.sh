#!/usr/bin/env bash
# Install what netplugin needs on a Debian host, idempotently: system packages, then the venv.
# Safe to run on every `make run` / `make test`: each step is skipped when already done.
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(
  docker.io openvswitch-switch etcd-server busybox-static iproute2 iptables
  iperf3 iputils-ping tcpdump ethtool procps psmisc curl python3 python3-venv
  debootstrap docker-registry containernetworking-plugins podman
)
# What `make test` and `make bench` need besides (bootstrap.sh --test): QEMU and ssh for the
# VM lab's guests (testbed/vm/), mke2fs for their image, FRR as routing mode's router.
TEST_PACKAGES=(qemu-system-x86 qemu-utils openssh-client e2fsprogs frr)
[ "${1:-}" != --test ] || PACKAGES+=("${TEST_PACKAGES[@]}")
PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# python3-venv is only needed when the interpreter cannot make a venv by itself.
if "$PYTHON" -c 'import ensurepip, venv' 2>/dev/null; then
  missing=("${missing[@]/python3-venv/}")
fi
missing=($(printf '%s\n' "${missing[@]}" | grep -v '^$' || true))
if ((${#missing[@]})); then
  if [ "$(id -u)" != 0 ]; then
    echo "bootstrap: missing system packages (${missing[*]}); run as root" >&2
    exit 1
  fi
  echo "bootstrap: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  # No systemd here: keep package scripts from trying to start services.
  printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  rm -f /usr/sbin/policy-rc.d
fi

# The venv gets the versions pinned in constraints.txt (make lock writes it). The
# stamp records what was installed: a change of the lock or of pyproject.toml reinstalls.
lock=constraints.txt
stamp="$VENV/.installed"
want=$(cat pyproject.toml "$lock" | sha256sum | cut -d' ' -f1)
if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV"
fi
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "bootstrap: installing the Python dependencies pinned in $lock into $VENV"
  "$VENV/bin/pip" install -q -c "$lock" --upgrade pip setuptools
  "$VENV/bin/pip" install -q -c "$lock" --build-constraint "$lock" -e '.[dev]'
  echo "$want" >"$stamp"
fi
