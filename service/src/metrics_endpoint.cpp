#include "ddpd/service/metrics_endpoint.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <prometheus/text_serializer.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <sstream>
#include <stdexcept>

namespace ddpd {
namespace {

void send_all(int fd, const std::string& data) {
  size_t sent = 0;
  while (sent < data.size()) {
    const ssize_t n = send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return;  // the scraper went away
    sent += static_cast<size_t>(n);
  }
}

std::string response(const char* status, const char* content_type, const std::string& body) {
  std::ostringstream out;
  out << "HTTP/1.1 " << status << "\r\nContent-Type: " << content_type
      << "\r\nContent-Length: " << body.size() << "\r\nConnection: close\r\n\r\n"
      << body;
  return out.str();
}

}  // namespace

MetricsEndpoint::MetricsEndpoint(const std::string& bind_host, int port,
                                 std::vector<std::weak_ptr<prometheus::Collectable>> collectables,
                                 int attempts)
    : collectables_(std::move(collectables)) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  if (inet_pton(AF_INET, bind_host.c_str(), &addr.sin_addr) != 1) {
    throw std::runtime_error("--metrics-host: '" + bind_host +
                             "' is not an IPv4 address to listen on");
  }
  std::string reason;
  for (int i = 0; i < std::max(1, attempts) && listen_fd_ < 0; ++i) {
    addr.sin_port = htons(static_cast<uint16_t>(port + i));
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 && listen(fd, 16) == 0) {
      listen_fd_ = fd;
    } else {
      reason = std::strerror(errno);
      close(fd);
    }
  }
  if (listen_fd_ < 0) {
    const std::string ports = attempts > 1
                                  ? std::to_string(port) + "-" + std::to_string(port + attempts - 1)
                                  : std::to_string(port);
    throw std::runtime_error("--metrics-port " + std::to_string(port) +
                             ": cannot serve /metrics on " + bind_host + ":" + ports + " (" +
                             reason + "); give each daemon on a host its own port, or 0 for none");
  }
  socklen_t length = sizeof(addr);
  getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &length);
  port_ = ntohs(addr.sin_port);
  thread_ = std::thread([this] { serve(); });
}

MetricsEndpoint::~MetricsEndpoint() {
  stopping_ = true;
  if (thread_.joinable()) thread_.join();
  close(listen_fd_);
}

void MetricsEndpoint::serve() {
  while (!stopping_) {
    pollfd ready{listen_fd_, POLLIN, 0};
    if (poll(&ready, 1, 200) <= 0) continue;  // wake up to notice stopping_
    const int client = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (client < 0) continue;
    answer(client);
    close(client);
  }
}

void MetricsEndpoint::answer(int client) {
  // A slow or silent client must not hold the endpoint: 2 s to send its request line.
  timeval timeout{2, 0};
  setsockopt(client, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  std::string request;
  char buffer[4096];
  while (request.find("\r\n\r\n") == std::string::npos && request.size() < 65536) {
    const ssize_t n = recv(client, buffer, sizeof(buffer), 0);
    if (n <= 0) break;
    request.append(buffer, static_cast<size_t>(n));
  }
  const std::string line = request.substr(0, request.find("\r\n"));
  std::istringstream words(line);
  std::string method, target;
  words >> method >> target;
  const std::string path = target.substr(0, target.find('?'));
  if (method != "GET" && method != "HEAD") {
    send_all(client, response("405 Method Not Allowed", "text/plain", "GET /metrics\n"));
    return;
  }
  if (path != "/metrics") {
    send_all(client, response("404 Not Found", "text/plain", "ddpd serves /metrics\n"));
    return;
  }
  std::vector<prometheus::MetricFamily> families;
  for (const auto& weak : collectables_) {
    if (auto collectable = weak.lock()) {
      auto collected = collectable->Collect();
      families.insert(families.end(), std::make_move_iterator(collected.begin()),
                      std::make_move_iterator(collected.end()));
    }
  }
  std::ostringstream body;
  prometheus::TextSerializer().Serialize(body, families);
  send_all(client, response("200 OK", "text/plain; version=0.0.4; charset=utf-8", body.str()));
}

}  // namespace ddpd
