#!/usr/bin/env bash
# Generates the Python gRPC stubs of ddpd's API (proto/ddpd/v1/ddpd.proto) into OUT_DIR:
# OUT_DIR/ddpd/v1/ddpd_pb2.py (messages) and ddpd_pb2_grpc.py (CoordinatorStub).
#
# Uses Debian's protoc (package protobuf-compiler, 3.21 on bookworm) with the gRPC Python plugin
# (package protobuf-compiler-grpc). Not python3-grpc-tools: bookworm's 1.14.1 bundles protoc 3.5.1,
# which refuses the API's proto3 `optional` fields ("Explicit 'optional' labels are disallowed in
# the Proto3 syntax"). The stubs run on python3-grpcio and python3-protobuf (4.21, matching
# protoc 3.21).
#
# Usage: generate_stubs.sh OUT_DIR   (the proto is taken from this checkout; $DDPD_PROTO_DIR
# overrides the directory holding ddpd/v1/ddpd.proto)
set -euo pipefail
out=${1:?usage: generate_stubs.sh OUT_DIR}
here=$(cd "$(dirname "$0")" && pwd)
proto_dir=${DDPD_PROTO_DIR:-$here/../../proto}

die() { echo "generate_stubs.sh: $*" >&2; exit 1; }
command -v protoc >/dev/null || die "no protoc (apt-get install protobuf-compiler)"
plugin=$(command -v grpc_python_plugin) ||
  die "no grpc_python_plugin (apt-get install protobuf-compiler-grpc)"
# proto3 `optional` needs protoc 3.15 or later.
version=$(protoc --version | awk '{print $2}')
IFS=. read -r major minor _ <<<"$version"
if [ "$major" -lt 3 ] || { [ "$major" -eq 3 ] && [ "$minor" -lt 15 ]; }; then
  die "protoc $version is too old for proto3 optional (3.15+ needed): use Debian's protobuf-compiler"
fi

mkdir -p "$out"
protoc --proto_path="$proto_dir" --python_out="$out" --grpc_python_out="$out" \
  --plugin=protoc-gen-grpc_python="$plugin" "$proto_dir/ddpd/v1/ddpd.proto"
echo "generated $out/ddpd/v1/ddpd_pb2.py and ddpd_pb2_grpc.py (protoc $version)"
