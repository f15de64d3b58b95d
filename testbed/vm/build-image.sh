#!/usr/bin/env bash
# Build the VM lab's guest image: Debian 12 from Debian packages only, with the stock kernel.
#
#   testbed/vm/build-image.sh OUT_DIR WHEELHOUSE
#
# OUT_DIR receives vmlinuz, initrd.img, root.ext4 (a sparse ext4 image made with mke2fs -d,
# so nothing is loop-mounted) and id_ed25519 (the key the lab logs in with). WHEELHOUSE is a
# directory of wheels for constraints.txt: the guest has no route to PyPI or the Debian
# mirror, so `make run` inside it finds every package already installed and pip finds every
# wheel on disk (/etc/pip.conf), as on a host behind an offline mirror.
# testbed/vm/image.py calls this when the image's inputs change; it needs root.
set -euo pipefail
# Mounts made by debootstrap and apt (proc, sys, dev) stay in this script's mount namespace.
if [ "${VM_BUILD_UNSHARED:-}" = "" ]; then
  exec env VM_BUILD_UNSHARED=1 unshare --mount --propagation private "$0" "$@"
fi
out=$1
wheels=$2
here=$(cd "$(dirname "$0")" && pwd)
checkout=$(cd "$here/../.." && pwd)
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}

# What scripts/bootstrap.sh installs, so `make run` in the guest has nothing left to fetch,
# and what a Debian host has besides: the stock kernel, kmod, sshd for the lab's control
# channel, make for the README's commands.
mapfile -t packages < <(sed -n '/^PACKAGES=(/,/^)/p' "$checkout/scripts/bootstrap.sh" | sed '1d;$d' | tr ' ' '\n' | grep -v '^$')
packages+=(linux-image-amd64 initramfs-tools kmod openssh-server make tini iputils-ping
  netcat-openbsd conntrack)

work=$(mktemp -d "${out%/}.build.XXXXXX")
root=$work/root
# Unmount before removing, and never cross into another filesystem: a mount left in the
# tree must not take the host's files with it.
cleanup() {
  for m in dev proc sys; do umount -R "$root/$m" 2>/dev/null || true; done
  rm -rf --one-file-system "$work"
}
trap cleanup EXIT


echo "vm-image: debootstrap bookworm ($mirror)"
debootstrap --variant=minbase bookworm "$root" "$mirror" >"$work/debootstrap.log" 2>&1 ||
  { tail -20 "$work/debootstrap.log" >&2; exit 1; }

# No daemon starts inside the chroot.
printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
chmod +x "$root/usr/sbin/policy-rc.d"
# A /dev of its own (a tmpfs with the few nodes package scripts use), never the host's.
mount -t proc proc "$root/proc"
mount -t tmpfs -o mode=755 tmpfs "$root/dev"
for node in null:1:3 zero:1:5 full:1:7 random:1:8 urandom:1:9 tty:5:0; do
  IFS=: read -r name major minor <<<"$node"
  mknod -m 666 "$root/dev/$name" c "$major" "$minor"
done
mkdir "$root/dev/pts" "$root/dev/shm"
# A clean environment: the host's PIP_*, PYTHON* and proxy settings are not the guest's.
in_root() {
  chroot "$root" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
    DEBIAN_FRONTEND=noninteractive LC_ALL=C "$@"
}

echo "vm-image: apt-get install ${#packages[@]} packages"
in_root apt-get update -qq
in_root apt-get install -y -qq --no-install-recommends "${packages[@]}" >"$work/apt.log" 2>&1 ||
  { tail -30 "$work/apt.log" >&2; exit 1; }
rm -f "$root/usr/sbin/policy-rc.d"

# Python: the wheels on disk, and a venv of them all for the lab's own runs (the checkout
# arrives read-only over 9p; `make run` makes its own .venv from the same wheels).
mkdir -p "$root/var/cache/netplugin-wheels"
cp "$wheels"/*.whl "$root/var/cache/netplugin-wheels/"
cat >"$root/etc/pip.conf" <<'PIP'
[global]
no-index = true
find-links = /var/cache/netplugin-wheels
PIP
cp "$checkout/constraints.txt" "$root/tmp/constraints.txt"
in_root python3 -m venv /opt/netplugin/venv
in_root /opt/netplugin/venv/bin/pip install -q -r /tmp/constraints.txt

# Guest setup: our init, sshd with the lab's key, no fstab, no udev-rule renames.
install -m 0755 "$here/vm-init" "$root/usr/local/sbin/vm-init"
ssh-keygen -q -t ed25519 -N '' -C netplugin-vm-lab -f "$work/id_ed25519"
install -d -m 0700 "$root/root/.ssh"
install -m 0600 "$work/id_ed25519.pub" "$root/root/.ssh/authorized_keys"
printf 'UseDNS no\nPermitRootLogin prohibit-password\nMaxSessions 64\nMaxStartups 64\n' \
  >"$root/etc/ssh/sshd_config.d/lab.conf"
: >"$root/etc/fstab"
echo netplugin-vm >"$root/etc/hostname"

# Smaller image: documentation, locales and apt lists are not needed in a guest.
rm -rf "$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/var/lib/apt/lists/* \
  "$root"/var/cache/apt/*.bin "$root"/var/cache/apt/archives/*.deb
umount "$root/dev" "$root/proc"

kernel=$(ls "$root"/boot/vmlinuz-* | sort -V | tail -1)
initrd=$(ls "$root"/boot/initrd.img-* | sort -V | tail -1)
cp "$kernel" "$work/vmlinuz"
cp "$initrd" "$work/initrd.img"
size=$(($(du -sm "$root" | cut -f1) + 1536))
echo "vm-image: mke2fs root.ext4 (${size}M)"
mke2fs -q -t ext4 -L root -d "$root" "$work/root.ext4" "${size}M"
mkdir -p "$out"
mv "$work/vmlinuz" "$work/initrd.img" "$work/root.ext4" "$work/id_ed25519" "$out/"
echo "vm-image: done ($out)"
