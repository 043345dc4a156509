#!/usr/bin/env bash
# Generates the Python gRPC stubs of ddpd's API (proto/ddpd/v1/*.proto) into OUT_DIR:
# OUT_DIR/ddpd/v1/ddpd_pb2.py (messages) and ddpd_pb2_grpc.py (CoordinatorStub).
#
# Runs `python -m grpc_tools.protoc` from PyPI's grpcio-tools, installed with grpcio and protobuf
# into the repo's virtualenv (.venv) by scripts/setup.sh from requirements.txt. Its bundled protoc
# accepts the API's proto3 `optional` fields, and it adds its own include directory for the
# well-known types. Generator and runtime come from the same venv, so the stubs match the
# protobuf runtime they run on.
#
# Usage: generate_stubs.sh OUT_DIR   (the proto is taken from this checkout; $DDPD_PROTO_DIR
# overrides the directory holding ddpd/v1/*.proto; $PYTHON overrides the Python, by default the
# checkout's .venv/bin/python)
set -euo pipefail
out=${1:?usage: generate_stubs.sh OUT_DIR}
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
proto_dir=${DDPD_PROTO_DIR:-$repo/proto}
python=${PYTHON:-$repo/.venv/bin/python}

die() { echo "generate_stubs.sh: $*" >&2; exit 1; }
[ -x "$python" ] || die "no $python (run scripts/setup.sh, which creates .venv)"
"$python" -c "import grpc_tools.protoc" 2>/dev/null ||
  die "$python has no grpc_tools (grpcio-tools; scripts/setup.sh installs it from requirements.txt)"
protos=("$proto_dir"/ddpd/v1/*.proto)
[ -e "${protos[0]}" ] || die "no $proto_dir/ddpd/v1/*.proto"

mkdir -p "$out"
"$python" -m grpc_tools.protoc --proto_path="$proto_dir" --python_out="$out" \
  --grpc_python_out="$out" "${protos[@]}"
version=$("$python" -m grpc_tools.protoc --version)
echo "generated $out/ddpd/v1/ddpd_pb2.py and ddpd_pb2_grpc.py ($version, grpcio-tools" \
  "$("$python" -c 'from importlib.metadata import version; print(version("grpcio-tools"))'))"
