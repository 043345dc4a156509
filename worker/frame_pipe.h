// Length-prefixed protobuf messages over a pipe: a 4-byte little-endian length, then the bytes.
#pragma once

#include <google/protobuf/message_lite.h>

#include <cstdint>

namespace ddpd {

// A frame larger than this is refused as corrupt: the largest message on the rank pipe is a
// step report with its spans (a few KB) or a result envelope (under 1 MB for 10,000 steps).
constexpr uint32_t kMaxFrameBytes = 64u << 20;

// Writes the whole frame (retrying short writes and EINTR). False when the reader is gone.
bool write_frame(int fd, const google::protobuf::MessageLite& message);

// Reads one frame into `message`. False at end of file, on a read error, on a frame over
// kMaxFrameBytes or one that does not parse.
bool read_frame(int fd, google::protobuf::MessageLite& message);

}  // namespace ddpd
