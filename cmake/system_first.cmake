# LibTorch's include/ carries headers of the protobuf and fmt built into the wheel
# (include/google/protobuf, include/fmt: fmt 12). In a file that sees LibTorch's headers and
# Debian's (ddpd-worker's daemon: the generated API and spdlog), LibTorch's would shadow Debian's
# (protobuf 3.21, fmt 9) and the file would not compile, or worse, compile against the wrong one.
# DDPD_SYSTEM_FIRST_DIR holds links to Debian's `google/` and `fmt/` only; ddpd_proto and
# ddpd_service put it on their consumers' include path ahead of LibTorch's (-I is searched before
# -isystem). No LibTorch header that the project includes uses either.
find_package(fmt REQUIRED)
set(DDPD_SYSTEM_FIRST_DIR ${CMAKE_BINARY_DIR}/system-first)
file(MAKE_DIRECTORY ${DDPD_SYSTEM_FIRST_DIR})
get_target_property(ddpd_fmt_include fmt::fmt INTERFACE_INCLUDE_DIRECTORIES)
list(GET Protobuf_INCLUDE_DIRS 0 ddpd_protobuf_include)
file(CREATE_LINK ${ddpd_fmt_include}/fmt ${DDPD_SYSTEM_FIRST_DIR}/fmt SYMBOLIC)
file(CREATE_LINK ${ddpd_protobuf_include}/google ${DDPD_SYSTEM_FIRST_DIR}/google SYMBOLIC)
