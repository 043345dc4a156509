// ddpd-coordinator: assigns ranks and rendezvous, runs the job queue, stores jobs in SQLite.
// Exit codes: 0 after SIGINT/SIGTERM, 1 on a start-up failure, 2 on bad flags.
#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>

#include <csignal>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include "coordinator_metrics.h"
#include "coordinator_service.h"
#include "ddpd/job_options.h"
#include "ddpd/net.h"
#include "ddpd/service/logging.h"
#include "store_lock.h"

namespace {

std::string read_file(const std::string& path, const char* flag) {
  std::ifstream in(path);
  if (!in) throw CLI::ValidationError(flag, "cannot read '" + path + "'");
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

volatile std::sig_atomic_t stop_requested = 0;
void on_signal(int) { stop_requested = 1; }

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ddpd coordinator: worker registry, job queue, rendezvous, job store"};
  std::string listen = "0.0.0.0:50051";
  std::string db_path = "ddpd.db";
  std::string token;
  std::string tls_cert, tls_key;
  ddpd::LogOptions log_options;                                  // level info, format text
  ddpd::coordinator::CoordinatorMetricsOptions metrics_options;  // port 9400
  double worker_timeout_s = 15, pending_timeout_s = 0;
  ddpd::coordinator::CoordinatorOptions limits;  // the limits' defaults, documented there
  app.add_option("--listen", listen, "host:port to serve gRPC on")
      ->check(CLI::Validator(ddpd::listen_address_error, "HOST:PORT"))
      ->capture_default_str();
  app.add_option("--db", db_path, "SQLite database file (created if missing)")
      ->capture_default_str();
  app.add_option("--token", token, "Shared token every RPC must carry (default: $DDPD_TOKEN)");
  app.add_option("--tls-cert", tls_cert, "PEM certificate: serve TLS");
  app.add_option("--tls-key", tls_key, "PEM private key for --tls-cert");
  app.add_option("--worker-timeout", worker_timeout_s,
                 "Seconds without heartbeat before a worker is lost")
      ->capture_default_str();
  app.add_option("--pending-timeout", pending_timeout_s,
                 "Seconds a job may wait for idle workers before failing (0: forever)")
      ->capture_default_str();
  app.add_option("--max-pending-jobs", limits.max_pending_jobs,
                 "SubmitJob is refused while this many jobs are pending")
      ->capture_default_str();
  app.add_option("--max-watchers-per-job", limits.max_watchers_per_job,
                 "Concurrent watch streams on one job")
      ->capture_default_str();
  app.add_option("--max-step-reports-per-job", limits.max_step_reports_per_job,
                 "Step reports stored per job (later ones dropped, with an incident)")
      ->capture_default_str();
  app.add_option("--max-message-bytes", limits.max_message_bytes, "Largest request accepted, bytes")
      ->capture_default_str();
  app.add_option("--max-session-queue-bytes", limits.max_session_queue_bytes,
                 "Bytes queued unsent for one worker session before it is dropped (a worker that "
                 "stopped reading)")
      ->capture_default_str();
  app.add_option("--prometheus-targets", limits.prometheus_targets,
                 "Keep this file listing the registered workers' /metrics endpoints (Prometheus "
                 "file_sd format)");
  app.add_option("--metrics-port", metrics_options.port,
                 "Serve Prometheus /metrics on this port (0: off)")
      ->capture_default_str();
  app.add_option("--metrics-host", metrics_options.bind_host,
                 "Address the /metrics endpoint listens on")
      ->capture_default_str();
  ddpd::add_log_flags(app, log_options);
  try {
    app.parse(argc, argv);
    if (token.empty()) {
      if (const char* env = std::getenv("DDPD_TOKEN")) token = env;
    }
    if (tls_cert.empty() != tls_key.empty()) {
      throw CLI::ValidationError("--tls-key", "--tls-cert and --tls-key go together");
    }
    if (worker_timeout_s <= 0) throw CLI::ValidationError("--worker-timeout", "must be > 0");
    if (pending_timeout_s < 0) throw CLI::ValidationError("--pending-timeout", "must be >= 0");
    if (limits.max_pending_jobs < 1)
      throw CLI::ValidationError("--max-pending-jobs", "must be >= 1");
    if (limits.max_watchers_per_job < 1) {
      throw CLI::ValidationError("--max-watchers-per-job", "must be >= 1");
    }
    if (limits.max_step_reports_per_job < 1) {
      throw CLI::ValidationError("--max-step-reports-per-job", "must be >= 1");
    }
    if (limits.max_message_bytes < 1024) {
      throw CLI::ValidationError("--max-message-bytes", "must be >= 1024");
    }
    if (limits.max_session_queue_bytes < 65536) {
      throw CLI::ValidationError("--max-session-queue-bytes", "must be >= 65536");
    }
    if (metrics_options.port < 0 || metrics_options.port > 65535) {
      throw CLI::ValidationError("--metrics-port", "must be 0 (off) or a port up to 65535");
    }
    ddpd::configure_logging(log_options);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  } catch (const ddpd::OptionError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }

  try {
    ddpd::coordinator::CoordinatorOptions options = limits;
    options.token = token;
    options.worker_timeout =
        std::chrono::milliseconds(static_cast<int64_t>(worker_timeout_s * 1000));
    options.pending_timeout =
        std::chrono::milliseconds(static_cast<int64_t>(pending_timeout_s * 1000));
    // Before the store opens: a second coordinator must not touch it (store_lock.h).
    ddpd::coordinator::StoreLock store_lock(db_path);
    auto store = std::make_unique<ddpd::coordinator::JobStore>(db_path);
    ddpd::coordinator::CoordinatorService service(options, std::move(store));
    ddpd::coordinator::CoordinatorMetrics metrics(metrics_options,
                                                  [&service] { return service.state_counts(); });
    service.on_step_report([&metrics] { metrics.count_step_report(); });
    service.on_message_handled(
        [&metrics](const char* kind, double seconds) { metrics.observe_message(kind, seconds); });

    std::shared_ptr<grpc::ServerCredentials> credentials = grpc::InsecureServerCredentials();
    if (!tls_cert.empty()) {
      grpc::SslServerCredentialsOptions ssl;
      ssl.pem_key_cert_pairs.push_back(
          {read_file(tls_key, "--tls-key"), read_file(tls_cert, "--tls-cert")});
      credentials = grpc::SslServerCredentials(ssl);
    }
    grpc::ServerBuilder builder;
    int bound_port = 0;
    builder.AddListeningPort(listen, credentials, &bound_port);
    // gRPC sets SO_REUSEPORT by default: a second coordinator on a busy --listen would start and
    // take half of the connections. Off, it fails below naming the address.
    builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
    builder.SetMaxReceiveMessageSize(options.max_message_bytes);
    builder.RegisterService(&service);
    std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> counters;
    counters.push_back(metrics.rpc_counter());
    builder.experimental().SetInterceptorCreators(std::move(counters));
    auto server = builder.BuildAndStart();
    if (!server || bound_port == 0) {
      spdlog::error("--listen: cannot listen on {} (in use, or not an address of this host)",
                    listen);
      return 1;
    }
    spdlog::info("coordinator listening on {} (db {}, tls {}, metrics {})", listen, db_path,
                 tls_cert.empty() ? "off" : "on",
                 metrics_options.port > 0
                     ? metrics_options.bind_host + ":" + std::to_string(metrics_options.port)
                     : std::string("off"));
    std::signal(SIGINT, on_signal);
    std::signal(SIGTERM, on_signal);
    while (!stop_requested) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    spdlog::info("shutting down");
    service.shutdown();
    server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
    return 0;
  } catch (const std::exception& e) {
    spdlog::error("coordinator failed: {}", e.what());
    return 1;
  }
}
