#include "ddpd/common/net.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <stdexcept>
#include <thread>

namespace ddpd {
namespace {

sockaddr_in ipv4_address(const std::string& host, int port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) addr.sin_addr.s_addr = INADDR_ANY;
  return addr;
}

bool accepts_connection(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0) return false;
  bool up = false;
  for (addrinfo* a = found; a != nullptr && !up; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    up = fd >= 0 && ::connect(fd, a->ai_addr, a->ai_addrlen) == 0;
    if (fd >= 0) close(fd);
  }
  freeaddrinfo(found);
  return up;
}

}  // namespace

bool can_bind(const std::string& host, int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in addr = ipv4_address(host, port);
  const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  return ok;
}

int free_port(const std::string& host) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw std::runtime_error("free_port: socket() failed");
  sockaddr_in addr = ipv4_address(host, 0);
  socklen_t len = sizeof(addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    close(fd);
    throw std::runtime_error("free_port: no free port on " + host);
  }
  close(fd);
  return ntohs(addr.sin_port);
}

bool wait_for_port(const std::string& host, int port, std::chrono::milliseconds timeout,
                   const std::function<bool()>& stop) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    if (accepts_connection(host, port)) return true;
    if (std::chrono::steady_clock::now() >= deadline || (stop && stop())) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

std::string listen_address_error(const std::string& address) {
  const auto colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0) return "'" + address + "' is not host:port";
  const std::string port = address.substr(colon + 1);
  const bool digits = !port.empty() && port.size() <= 5 &&
                      port.find_first_not_of("0123456789") == std::string::npos;
  if (!digits || std::stol(port) > 65535) {
    return "port '" + port + "' in '" + address + "' is not in 0..65535";
  }
  return "";
}

}  // namespace ddpd
