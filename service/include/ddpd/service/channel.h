// The one way daemons and ddpctl open a channel to the coordinator.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

namespace ddpd {

// TLS when tls_ca_path (a PEM CA file) is set, plaintext otherwise. Reconnects quickly: a
// coordinator that is (re)starting is the common case, and gRPC's default backoff (1 s growing
// to 120 s) would leave callers waiting long after it is up. Throws std::invalid_argument
// ("--tls-ca: …") when the CA file cannot be read.
std::shared_ptr<grpc::Channel> coordinator_channel(const std::string& address,
                                                   const std::string& tls_ca_path);

}  // namespace ddpd
