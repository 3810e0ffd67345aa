#!/bin/sh
# Unpacks Debian's i386 builds of python3.11 and coreutils, and the libraries they load
# beyond the system's libc6-i386 (/lib32, /lib/ld-linux.so.2), into DIR/root for
# test_real_programs_i386.py.  Nothing is installed: apt works on package lists and
# a download cache of its own in DIR (the i386 architecture is not added to dpkg, so
# the machine's apt and dpkg are left as they were), and dpkg-deb -x unpacks.  Run
# again, it does nothing while DIR/root holds the unpack of the same package list.
set -eu
dir=${1:-.i386}
# python3.11: the interpreter, its minimal and full standard library (json,
# subprocess, threading), libexpat and zlib (ldd); coreutils: ls needs libselinux and
# its libpcre2.
packages="python3.11-minimal libpython3.11-minimal libpython3.11-stdlib libexpat1 zlib1g
coreutils libselinux1 libpcre2-8-0"
stamp="$dir/root/.unpacked"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$packages" ]; then
    exit 0
fi
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
rm -rf "$dir/root" "$dir/debs"
mkdir -p "$dir/apt/lists/partial" "$dir/apt/archives/partial" "$dir/debs" "$dir/root"
# i386 as apt's only architecture, the machine's sources and keys, everything apt
# writes in $dir; as root apt would hand the download to the _apt user, who cannot
# write into a checkout.
set -- -q -o APT::Architecture=i386 -o APT::Architectures::=i386 \
    -o Dir::State::Lists="$dir/apt/lists" -o Dir::Cache="$dir/apt" \
    -o Dir::State::status=/dev/null -o APT::Sandbox::User="$(id -un)"
echo "fetching Debian i386 packages into $dir:" $packages
apt-get "$@" update >/dev/null
# shellcheck disable=SC2086
(cd "$dir/debs" && apt-get "$@" download $packages >/dev/null)
for deb in "$dir"/debs/*.deb; do
    dpkg-deb -x "$deb" "$dir/root"
done
printf '%s' "$packages" > "$stamp"
