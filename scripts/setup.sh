#!/usr/bin/env bash
# Installs every build, test and peer-benchmark dependency from Debian bookworm packages.
# Idempotent: packages already present are skipped, so re-running costs one dpkg query.
#
# Usage: scripts/setup.sh [--with-cuda-toolkit]
#   --with-cuda-toolkit  also Debian's nvidia-cuda-toolkit (nvcc 11.8, ~1.6 GB) and g++-11, its
#                        host compiler, from bookworm's contrib and non-free components (added to
#                        apt's sources when missing), unless an nvcc is already installed. The test
#                        command (scripts/test.sh) passes it: CI compiles kernels/cuda with it.
set -euo pipefail
with_cuda_toolkit=0
for arg in "$@"; do
  case $arg in
    --with-cuda-toolkit) with_cuda_toolkit=1 ;;
    *) echo "setup: unknown argument '$arg' (expected --with-cuda-toolkit)" >&2; exit 2 ;;
  esac
done

packages=(
  build-essential cmake ninja-build pkg-config git clang-format
  libtorch-dev python3-torch                     # training core; Python peer benchmarks
  libopenblas0-pthread                           # fast BLAS for LibTorch (else netlib reference BLAS)
  libgloo-dev                                    # c10d Gloo backend headers
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  python3-grpcio python3-protobuf                # the Python API example and its test
  libspdlog-dev libfmt-dev prometheus-cpp-dev libsqlite3-dev libcli11-dev
  nlohmann-json3-dev libgtest-dev libgmock-dev
  libyaml-cpp-dev                                # ddpctl job files (-f job.yaml)
  openssl                                        # test certificates for the TLS test
  gnuplot-nox                                    # ddpctl --plot (optional at run time)
  prometheus                                     # the real Prometheus server the tests scrape with
  iproute2                                       # ip netns: the multi-host test's own hosts
  curl docker.io docker-compose                  # the compose stack and its test (dockerd)
  slurmctld slurmd slurm-client munge            # the Slurm cluster the Slurm test starts
)

# Debian's nvcc 11.8 needs a host g++ no newer than 11 (bookworm's default is 12).
cuda_sources=/etc/apt/sources.list.d/ddpd-cuda-toolkit.sources
if [ "$with_cuda_toolkit" = 1 ] && ! command -v nvcc >/dev/null && [ ! -x /usr/local/cuda/bin/nvcc ]; then
  packages+=(nvidia-cuda-toolkit g++-11)
fi

# node and npm run the Kubernetes manifest validator (scripts/check-kubernetes.sh), whose
# packages come from npm. Any node >= 14 will do: Debian's unless one is already on the PATH.
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  packages+=(nodejs npm)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]})); then
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  echo "setup: installing ${missing[*]}"
  if [[ " ${missing[*]} " == *" nvidia-cuda-toolkit "* ]] && [ ! -e "$cuda_sources" ] &&
    ! apt-cache show nvidia-cuda-toolkit >/dev/null 2>&1; then
    # nvidia-cuda-toolkit is in non-free; its libcuda1 needs nvidia-support from contrib.
    printf '%s\n' "Types: deb" "URIs: http://deb.debian.org/debian" \
      "Suites: bookworm bookworm-updates" "Components: contrib non-free non-free-firmware" \
      "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg" |
      "${sudo_cmd[@]}" tee "$cuda_sources" >/dev/null
  fi
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: all dependencies present"
fi
