#!/usr/bin/env bash
# oneCCL's CPU runtime from PyPI, for bench_torch_backend.sh's oneCCL peer, into DIR (default
# build/bench/oneccl): include/ (oneccl-devel's headers) and lib/ (the libraries a CPU run loads).
# Version 2021.17.2, because the newest, oneccl-cpu 2022.2.0, requires libfabric >= 2.6, which is
# not on PyPI; 2021.17.2 requires impi-rt (Intel MPI's runtime), which carries libfabric 2.2.0.
# oneccl-cpu's libccl.so.1 needs libccl.so.2 and libccl_legacy_cpu.so, found only in the
# `oneccl` wheel (157 MB, whose 331 MB SYCL libccl.so.1 is not extracted). About 310 MB of
# downloads, once; the wheels are deleted after extraction.
# Usage: tests/bench/fetch_oneccl.sh [DIR]   (prints the reason and exits 1 when it cannot)
set -euo pipefail
cd "$(dirname "$0")/../.."
dir=${1:-build/bench/oneccl}
version=2021.17.2
python=$PWD/.venv/bin/python
[ -f "$dir/lib/libfabric.so" ] && [ -f "$dir/include/oneapi/ccl.hpp" ] && exit 0
command -v unzip >/dev/null || { echo "unzip is not installed (apt-get install -y unzip)"; exit 1; }
wheels=$(mktemp -d)
trap 'rm -rf "$wheels"' EXIT
"$python" -m pip download --quiet --no-deps --disable-pip-version-check -d "$wheels" \
  "oneccl-cpu==$version" "oneccl-devel==$version" "oneccl==$version" "impi-rt==$version" ||
  { echo "pip could not download oneCCL $version's wheels from PyPI"; exit 1; }
rm -rf "$dir" && mkdir -p "$dir/lib/prov" "$dir/include"
x=$wheels/x
unzip -q -o "$wheels"/oneccl_cpu-*.whl '*/data/lib/libccl.so.1.0' -d "$x"
unzip -q -o "$wheels"/oneccl_devel-*.whl '*/data/include/*' -d "$x"
unzip -q -o "$wheels"/oneccl-"$version"-*.whl '*/data/lib/libccl.so.2.0' \
  '*/data/lib/libccl_legacy_cpu.so' -d "$x"
unzip -q -o "$wheels"/impi_rt-*.whl '*/data/lib/libfabric.so.1' '*/data/lib/libshm-fi.so' \
  '*/data/lib/libtcp-fi.so' '*/data/lib/librxm-fi.so' -d "$x"
cp -r "$x"/oneccl_devel-*/data/include/. "$dir/include/"
cp "$x"/oneccl_cpu-*/data/lib/libccl.so.1.0 "$dir/lib/libccl.so.1"
cp "$x"/oneccl-"$version".data/data/lib/libccl.so.2.0 "$dir/lib/libccl.so.2"
cp "$x"/oneccl-"$version".data/data/lib/libccl_legacy_cpu.so "$dir/lib/"
cp "$x"/impi_rt-*/data/lib/libfabric.so.1 "$dir/lib/"
ln -s libfabric.so.1 "$dir/lib/libfabric.so"  # oneCCL dlopens "libfabric.so"
cp "$x"/impi_rt-*/data/lib/*-fi.so "$dir/lib/prov/"
echo "$version" >"$dir/VERSION"
