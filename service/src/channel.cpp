#include "ddpd/service/channel.h"

#include <fstream>
#include <sstream>
#include <stdexcept>

namespace ddpd {

std::shared_ptr<grpc::Channel> coordinator_channel(const std::string& address,
                                                   const std::string& tls_ca_path) {
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
  if (!tls_ca_path.empty()) {
    std::ifstream in(tls_ca_path);
    if (!in) throw std::invalid_argument("--tls-ca: cannot read '" + tls_ca_path + "'");
    std::stringstream pem;
    pem << in.rdbuf();
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = pem.str();
    credentials = grpc::SslCredentials(ssl);
  }
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  // Also each connection attempt's deadline: at 100 ms a loaded host's handshakes timed out
  // again and again ("tcp handshaker shutdown"), and daemons took up to 4.5 s to register with a
  // coordinator that was back (tests/bench/bench_control_plane.sh). A refused connection still
  // fails at once.
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 2000);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  return grpc::CreateCustomChannel(address, credentials, args);
}

}  // namespace ddpd
