#!/usr/bin/env bash
# Installs every build, test and peer-benchmark dependency:
#  - from Debian bookworm's packages: the toolchain, gRPC and Protocol Buffers, spdlog,
#    prometheus-cpp, SQLite, CLI11, yaml-cpp, GoogleTest and the servers the tests start
#    (Prometheus, Slurm, munge);
#  - from PyPI, into .venv/ at the project root (git-ignored): requirements.txt, pinned, and
#    torch_backend/requirements-test.txt (pytest, for ddpd_torch's suite). Its torch 2.11.0 is
#    LibTorch for the C++ build, ddpd_torch's build, the PyTorch peers and torchrun.
# The CUDA 13.0 toolkit (nvcc, NCCL) is the machine's own (/usr/local/cuda); nothing here installs
# it. Idempotent: packages already present are skipped (one dpkg query), and .venv/ is left alone
# while it matches the requirements files (a hash kept in .venv/). Prints what it downloaded and
# how long it took.
# Usage: scripts/setup.sh [demo]
#   demo: only what scripts/demo.sh needs: the packages the CPU build compiles against, and
#         requirements-demo.txt (torch without its CUDA wheels: 542 MB instead of 2.9 GB). A later
#         scripts/setup.sh adds the rest.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=all
case $# in
  0) ;;
  1) [ "$1" = demo ] || { echo "setup: unexpected argument '$1' (expected demo or none)" >&2; exit 2; }
     mode=demo ;;
  *) echo "setup: unexpected argument '$2' (setup.sh takes at most one: demo)" >&2; exit 2 ;;
esac

sudo_cmd=()
[ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)

# Bytes received on every interface but loopback: what this script downloads.
received_bytes() {
  awk -F'[: ]+' 'NR > 2 && $2 != "lo" { sum += $3 } END { printf "%.0f\n", sum }' /proc/net/dev
}
start_bytes=$(received_bytes)
start_seconds=$SECONDS

# What the CPU build compiles against (the demo's set), then what the tests and peers add.
packages=(
  build-essential cmake ninja-build pkg-config git
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libspdlog-dev libfmt-dev prometheus-cpp-dev libsqlite3-dev libcli11-dev
  nlohmann-json3-dev libgtest-dev libgmock-dev
  libyaml-cpp-dev                                # ddpctl job files (-f job.yaml)
)
[ "$mode" = demo ] || packages+=(
  clang-format
  libopenblas0-pthread                           # fast BLAS for the peers' numpy
  openssl                                        # test certificates for the TLS test
  gnuplot-nox                                    # ddpctl --plot (optional at run time)
  prometheus                                     # the real Prometheus server the tests scrape with
  iproute2                                       # ip netns: the multi-host test's own hosts
  curl docker.io docker-compose                  # the compose stack and its test (dockerd)
  slurmctld slurmd slurm-client munge            # the Slurm cluster the Slurm test starts
  binutils                                       # readelf: the linkage tests
  libopenmpi-dev openmpi-bin unzip               # bench_torch_backend.sh's Open MPI and oneCCL peers
)
# The venv's interpreter: python3 on the PATH when it can make one, else Debian's with its venv
# module.
python=python3
if ! command -v python3 >/dev/null || ! python3 -c 'import ensurepip, venv' 2>/dev/null; then
  python=/usr/bin/python3
  packages+=(python3 python3-venv)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: Debian packages present"
fi

# .venv/: made once, refreshed when the requirements change. The stamp holds the hash of the
# requirements files last installed in full (requirements.txt and the pytest suite's
# torch_backend/requirements-test.txt); requirements.txt's install includes the demo's.
stamp=.venv/.requirements.sha256
full_requirements=(requirements.txt torch_backend/requirements-test.txt)
full=$(cat "${full_requirements[@]}" | sha256sum | cut -d' ' -f1)
demo=demo-$(sha256sum requirements-demo.txt | cut -d' ' -f1)
have=$(cat "$stamp" 2>/dev/null || true)
# PyPI's uv installs the requirements: it downloads the wheels in parallel and links them from
# its cache (~/.cache/uv). requirements.txt from empty caches on a 2-core host: 19 s, where pip
# took 100 s for the same 2,858 MB. pip installs only uv itself. The full install compiles the
# bytecode as pip does (22 s more): without it the tests' first Python processes each compiled
# torch and transformers as they imported them (an HF parity test took 32 s instead of 11). The
# demo runs no Python, so it skips that.
uv_version=0.13.9
pypi_install() {
  if [ "$(.venv/bin/uv --version 2>/dev/null | cut -d' ' -f2)" != "$uv_version" ]; then
    .venv/bin/python -m pip install --quiet --disable-pip-version-check --progress-bar off \
      "uv==$uv_version"
  fi
  .venv/bin/uv pip install --quiet --python .venv/bin/python "$@"
}
if [ -x .venv/bin/python ] && { [ "$have" = "$full" ] || [ "$mode:$have" = "demo:$demo" ]; }; then
  matched="${full_requirements[*]}"
  [ "$have" = "$full" ] || matched=requirements-demo.txt
  echo "setup: .venv matches $matched"
else
  [ -x .venv/bin/python ] || "$python" -m venv .venv
  if [ "$mode" = demo ]; then
    echo "setup: installing requirements-demo.txt into .venv (torch 2.11.0 without its CUDA wheels)"
    pypi_install --no-deps -r requirements-demo.txt
    echo "$demo" >"$stamp"
  else
    echo "setup: installing ${full_requirements[*]} into .venv (torch 2.11.0 with CUDA wheels)"
    pypi_install --compile-bytecode -r requirements.txt -r torch_backend/requirements-test.txt
    echo "$full" >"$stamp"
  fi
fi

if ! command -v nvcc >/dev/null && [ ! -x /usr/local/cuda/bin/nvcc ]; then
  echo "setup: no nvcc (the CUDA 13.0 toolkit at /usr/local/cuda): the CUDA build will not build"
fi
downloaded=$(($(received_bytes) - start_bytes))
echo "setup: done in $((SECONDS - start_seconds)) s, downloaded $((downloaded / 1000000)) MB"
