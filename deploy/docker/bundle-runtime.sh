#!/usr/bin/env bash
# Copies executables and every shared library they load (ldd, symlinks resolved) into a root
# file system tree: the whole runtime of a FROM-scratch image, with no package manager in it.
# Usage: bundle-runtime.sh OUT_DIR EXECUTABLE...   (executables land in OUT_DIR/usr/local/bin)
set -euo pipefail
out=${1:?usage: bundle-runtime.sh OUT_DIR EXECUTABLE...}; shift
mkdir -p "$out/usr/local/bin" "$out/tmp" "$out/etc" "$out/var/lib/ddpd"
chmod 1777 "$out/tmp"
for exe in "$@"; do
  cp -L "$exe" "$out/usr/local/bin/"
  # "libfoo.so => /path/libfoo.so (0x…)" and the loader's own "/lib64/ld-linux… (0x…)".
  { ldd "$exe" 2>/dev/null || true; } | awk '/=> \// {print $3} /^\t\// {print $1}' | while read -r lib; do
    [ -e "$out$lib" ] || { mkdir -p "$out$(dirname "$lib")"; cp -L "$lib" "$out$lib"; }
  done
done
# Name resolution and a user database, as the binaries' libc expects to find them.
printf 'root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/:/sbin/nologin\n' \
  >"$out/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' >"$out/etc/group"
printf 'hosts: files dns\n' >"$out/etc/nsswitch.conf"
for lib in /lib/x86_64-linux-gnu/libnss_files.so.2 /lib/x86_64-linux-gnu/libnss_dns.so.2; do
  [ -e "$lib" ] && mkdir -p "$out$(dirname "$lib")" && cp -L "$lib" "$out$lib"
done
# The demo's training text (--data-text /usr/share/common-licenses/GPL-3, docs/data.md).
mkdir -p "$out/usr/share/common-licenses"
cp /usr/share/common-licenses/GPL-2 /usr/share/common-licenses/GPL-3 "$out/usr/share/common-licenses/"
du -sh "$out" | awk '{print "bundle: " $1 " in " $2}'
