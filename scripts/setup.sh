#!/usr/bin/env bash
# Installs every build, test and peer-benchmark dependency from Debian bookworm packages.
# Idempotent: packages already present are skipped, so re-running costs one dpkg query.
set -euo pipefail

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
)

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
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: all dependencies present"
fi
