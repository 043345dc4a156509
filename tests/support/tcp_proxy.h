// A loopback TCP proxy a test controls: it forwards every connection from its port to a target,
// and cut() ends them all and refuses new ones until restore(), like a link that goes down.
#pragma once

#include <atomic>
#include <mutex>
#include <thread>
#include <vector>

namespace ddpd::testing {

// Thread contract: the constructor, cut(), restore() and the destructor from the test's thread;
// the proxy's own threads accept and copy bytes.
class TcpProxy {
 public:
  explicit TcpProxy(int target_port);  // listens on an unused loopback port
  ~TcpProxy();
  TcpProxy(const TcpProxy&) = delete;
  TcpProxy& operator=(const TcpProxy&) = delete;

  int port() const { return port_; }
  void cut();      // closes every forwarded connection; new ones are accepted and closed at once
  void restore();  // forwards new connections again

 private:
  void accept_loop();
  void forward(int client, int upstream);

  const int target_port_;
  int port_ = 0;
  int listener_ = -1;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> cut_{false};
  std::mutex mutex_;
  std::vector<int> open_fds_;  // both ends of every forwarded connection
  std::vector<std::thread> threads_;
  std::thread acceptor_;
};

}  // namespace ddpd::testing
