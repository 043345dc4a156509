#!/usr/bin/env bash
# Makes the Debian bookworm base image locally, for machines that reach a Debian mirror but no
# image registry: debootstrap a minimal root file system and `docker import` it.
# Usage: make-base-image.sh [TAG (ddpd-base:bookworm)] [MIRROR (http://deb.debian.org/debian)]
set -euo pipefail
tag=${1:-ddpd-base:bookworm}
mirror=${2:-http://deb.debian.org/debian}
if docker image inspect "$tag" >/dev/null 2>&1; then echo "$tag exists"; exit 0; fi
command -v debootstrap >/dev/null || { echo "needs debootstrap (apt-get install debootstrap)" >&2; exit 1; }
root=$(mktemp -d /tmp/ddpd-rootfs-XXXXXX)
trap 'rm -rf "$root"' EXIT
debootstrap --variant=minbase bookworm "$root" "$mirror"
# The image's apt uses the same mirror; no recommends, and no documentation, keep it small.
echo "deb $mirror bookworm main" >"$root/etc/apt/sources.list"
printf 'APT::Install-Recommends "false";\nAPT::Install-Suggests "false";\n' \
  >"$root/etc/apt/apt.conf.d/90ddpd"
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
tar -C "$root" -c . | docker import - "$tag"
echo "made $tag"
