#include "support/tcp_proxy.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <stdexcept>

namespace ddpd::testing {
namespace {

sockaddr_in loopback(int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return a;
}

}  // namespace

TcpProxy::TcpProxy(int target_port) : target_port_(target_port) {
  listener_ = ::socket(AF_INET, SOCK_STREAM, 0);
  const int one = 1;
  setsockopt(listener_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in a = loopback(0);
  if (::bind(listener_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      ::listen(listener_, 64) != 0) {
    throw std::runtime_error("TcpProxy: cannot listen");
  }
  socklen_t len = sizeof(a);
  getsockname(listener_, reinterpret_cast<sockaddr*>(&a), &len);
  port_ = ntohs(a.sin_port);
  acceptor_ = std::thread([this] { accept_loop(); });
}

TcpProxy::~TcpProxy() {
  stopping_ = true;
  cut();
  ::shutdown(listener_, SHUT_RDWR);
  acceptor_.join();
  ::close(listener_);
  for (auto& t : threads_) t.join();
}

void TcpProxy::cut() {
  cut_ = true;
  std::lock_guard<std::mutex> lock(mutex_);
  for (int fd : open_fds_) ::shutdown(fd, SHUT_RDWR);  // the copiers see the end and close
}

void TcpProxy::restore() { cut_ = false; }

void TcpProxy::accept_loop() {
  while (!stopping_) {
    pollfd p{listener_, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    const int client = ::accept(listener_, nullptr, nullptr);
    if (client < 0) continue;
    if (cut_) {
      ::close(client);  // the link is down: the connection ends at once
      continue;
    }
    const int upstream = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a = loopback(target_port_);
    if (::connect(upstream, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
      ::close(client);
      ::close(upstream);
      continue;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    open_fds_.push_back(client);
    open_fds_.push_back(upstream);
    threads_.emplace_back([this, client, upstream] { forward(client, upstream); });
  }
}

// Copies both ways until either side ends (or cut() shuts both down), then closes both.
void TcpProxy::forward(int client, int upstream) {
  char buffer[65536];
  pollfd fds[2] = {{client, POLLIN, 0}, {upstream, POLLIN, 0}};
  for (bool open = true; open && !stopping_;) {
    if (::poll(fds, 2, 100) <= 0) continue;
    for (int i = 0; i < 2 && open; ++i) {
      if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      const ssize_t n = ::read(fds[i].fd, buffer, sizeof(buffer));
      open = n > 0 && ::send(fds[1 - i].fd, buffer, n, MSG_NOSIGNAL) == n;
    }
  }
  std::lock_guard<std::mutex> lock(mutex_);
  for (int fd : {client, upstream}) {
    open_fds_.erase(std::remove(open_fds_.begin(), open_fds_.end(), fd), open_fds_.end());
    ::close(fd);
  }
}

}  // namespace ddpd::testing
