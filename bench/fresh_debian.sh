#!/bin/bash
# `make demo` timed on a fresh Debian 12: a minimal bookworm made by debootstrap (as
# root), given what a checkout needs before `make` (git, make, the CA certificates),
# then a clone of this checkout and `time make demo` inside it.
#
#   sudo bench/fresh_debian.sh [DIR]     (DIR: where the system goes, /tmp/pydyn-deb12)
#
# A base system made earlier is reused from DIR.base (debootstrap downloads ~40 MB);
# DIR itself is always a fresh copy of it.  This machine's extra CA certificates are
# copied in, so that apt and pip work behind the same proxy as here.
set -euo pipefail
root=${1:-/tmp/pydyn-deb12}
here=$(cd "$(dirname "$0")/.." && pwd)
mirror=http://deb.debian.org/debian

if [ ! -x "$root.base/bin/bash" ]; then
    command -v debootstrap >/dev/null || apt-get install -y -qq debootstrap
    debootstrap --variant=minbase bookworm "$root.base" "$mirror" >"$root.base.log" 2>&1
fi
cleanup() {
    for m in dev/shm dev proc sys; do umount -l "$root/$m" 2>/dev/null || true; done
}
trap cleanup EXIT
cleanup
rm -rf "$root"
mkdir -p "$root"
cp -a "$root.base/." "$root/"
mkdir -p "$root/usr/local/share/ca-certificates"
cp /usr/local/share/ca-certificates/* "$root/usr/local/share/ca-certificates/" 2>/dev/null || true
cp /etc/resolv.conf "$root/etc/resolv.conf"
mount -t proc proc "$root/proc"
mount --rbind /dev "$root/dev"
mount -t sysfs sys "$root/sys"
mount -t tmpfs tmpfs "$root/dev/shm"
chroot "$root" apt-get update -qq
chroot "$root" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq git make ca-certificates \
    >/dev/null
chroot "$root" update-ca-certificates >/dev/null
git clone -q "$here" "$root/root/pydyn"
echo "make demo on a fresh Debian 12 ($(nproc) CPUs, load $(cut -d' ' -f1 /proc/loadavg)):"
start=$(date +%s%N)
chroot "$root" bash -c 'cd /root/pydyn && make demo' >"$root.demo.log" 2>&1
end=$(date +%s%N)
echo "  $(( (end - start) / 1000000 )) ms wall, load $(cut -d' ' -f1 /proc/loadavg) at the end" \
     "(output: $root.demo.log)"
