#include "frame_pipe.h"

#include <unistd.h>

#include <cerrno>
#include <string>

namespace ddpd {
namespace {

bool write_all(int fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = ::write(fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

bool read_all(int fd, char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = ::read(fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

bool write_frame(int fd, const google::protobuf::MessageLite& message) {
  std::string frame(4, '\0');
  const uint32_t size = static_cast<uint32_t>(message.ByteSizeLong());
  for (int i = 0; i < 4; ++i) frame[i] = static_cast<char>((size >> (8 * i)) & 0xff);
  if (!message.AppendToString(&frame)) return false;
  return write_all(fd, frame.data(), frame.size());
}

bool read_frame(int fd, google::protobuf::MessageLite& message) {
  unsigned char header[4];
  if (!read_all(fd, reinterpret_cast<char*>(header), 4)) return false;
  const uint32_t size =
      header[0] | header[1] << 8 | header[2] << 16 | static_cast<uint32_t>(header[3]) << 24;
  if (size > kMaxFrameBytes) return false;
  std::string body(size, '\0');
  if (!read_all(fd, body.data(), size)) return false;
  return message.ParseFromString(body);
}

}  // namespace ddpd
