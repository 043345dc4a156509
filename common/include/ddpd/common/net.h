// Small TCP helpers used wherever a port is chosen or awaited: the rendezvous (waiting for rank
// 0's store), the worker daemon (its rendezvous port), ddpctl local and the tests. They sit in
// the bottom library because both the training core and the daemons need them; plain POSIX.
#pragma once

#include <chrono>
#include <functional>
#include <string>

namespace ddpd {

// True when a TCP socket can bind host:port now (host: an IPv4 literal; anything else binds
// all interfaces).
bool can_bind(const std::string& host, int port);

// Why `address` is not a host:port to listen on, or "" when it is: the port must be a decimal
// 0..65535 (gRPC silently listens on a random port for one out of range).
std::string listen_address_error(const std::string& address);

// A port the kernel hands out as free on `host` (bound to port 0, then released). Racy by
// nature: another process may take it before the caller binds it.
int free_port(const std::string& host = "127.0.0.1");

// The ports a worker daemon probes for its rendezvous store (--rendezvous-port 0). They lie
// below Linux's default ephemeral range (32768-60999), so no outgoing connection is given one
// while it stays reserved, by convention only, between jobs; anything else that picks a port
// to listen on (the tests) keeps out of them.
constexpr int kRendezvousPortFirst = 20000;
constexpr int kRendezvousPortCount = 12000;

// Polls until host:port accepts a TCP connection or `timeout` passes; returns whether it did.
// `host` may be a name or an IPv4/IPv6 literal. `stop`, when given, is asked at each poll: true
// ends the wait (the return is then false).
bool wait_for_port(const std::string& host, int port, std::chrono::milliseconds timeout,
                   const std::function<bool()>& stop = {});

}  // namespace ddpd
