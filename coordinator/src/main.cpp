// ddpd-coordinator: assigns ranks and rendezvous, runs the job queue, stores jobs in SQLite.
// Exit codes: 0 after SIGINT/SIGTERM, 1 on a start-up failure, 2 on bad flags (OptionError
// naming the flag, as ddpctl and ddpd-worker report theirs).
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
#include "ddpd/common/job_options.h"
#include "ddpd/common/net.h"
#include "ddpd/service/logging.h"
#include "store_lock.h"

namespace {

using namespace ddpd;
using namespace ddpd::coordinator;

double seconds(std::chrono::milliseconds duration) {
  return std::chrono::duration<double>(duration).count();
}
std::chrono::milliseconds milliseconds(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

struct CoordinatorFlags {
  std::string listen = "0.0.0.0:50051";
  std::string db_path = "ddpd.db";
  std::string tls_cert, tls_key;
  bool insecure = false;              // serve without a token: every caller may do anything
  LogOptions log;                     // level info, format text
  CoordinatorMetricsOptions metrics;  // port 9400
  CoordinatorOptions options;         // token, timeouts and limits: defaults named there
  // The timeouts in seconds on the command line; their defaults are CoordinatorOptions'.
  double worker_timeout_s = seconds(CoordinatorOptions{}.worker_timeout);
  double pending_timeout_s = seconds(CoordinatorOptions{}.pending_timeout);
  double adopt_timeout_s = seconds(CoordinatorOptions{}.adopt_timeout);
};

void add_flags(CLI::App& app, CoordinatorFlags& f) {
  CoordinatorOptions& o = f.options;
  app.add_option("--listen", f.listen, "host:port to serve gRPC on")
      ->check(CLI::Validator(listen_address_error, "HOST:PORT"))
      ->capture_default_str();
  app.add_option("--db", f.db_path, "SQLite database file (created if missing)")
      ->capture_default_str();
  app.add_option("--token", o.token, "Shared token every RPC must carry (default: $DDPD_TOKEN)");
  app.add_flag("--insecure", f.insecure,
               "Serve without a token: anyone who reaches --listen may submit, cancel and read "
               "every job (a test bench only)");
  app.add_option("--tls-cert", f.tls_cert, "PEM certificate: serve TLS");
  app.add_option("--tls-key", f.tls_key, "PEM private key for --tls-cert");
  app.add_option("--worker-timeout", f.worker_timeout_s,
                 "Seconds without heartbeat before a worker is lost")
      ->capture_default_str();
  app.add_option("--pending-timeout", f.pending_timeout_s,
                 "Seconds a job may wait for idle workers before failing (0: forever)")
      ->capture_default_str();
  app.add_option("--adopt-timeout", f.adopt_timeout_s,
                 "Seconds a job found running at start waits for its ranks' workers to claim "
                 "them; an unclaimed rank is lost")
      ->capture_default_str();
  app.add_flag("!--no-adopt", o.adopt,
               "Restart (or fail) the jobs found running at start instead of adopting them");
  app.add_option("--max-pending-jobs", o.max_pending_jobs,
                 "SubmitJob is refused while this many jobs are pending")
      ->capture_default_str();
  app.add_option("--max-watchers-per-job", o.max_watchers_per_job,
                 "Concurrent watch streams on one job")
      ->capture_default_str();
  app.add_option("--max-step-reports-per-job", o.max_step_reports_per_job,
                 "Step reports stored per job (later ones dropped, with an incident)")
      ->capture_default_str();
  app.add_option("--max-message-bytes", o.max_message_bytes, "Largest request accepted, bytes")
      ->capture_default_str();
  app.add_option("--max-session-queue-bytes", o.max_session_queue_bytes,
                 "Bytes queued unsent for one worker session before it is dropped (a worker that "
                 "stopped reading)")
      ->capture_default_str();
  app.add_option("--prometheus-targets", o.prometheus_targets,
                 "Keep this file listing the registered workers' /metrics endpoints (Prometheus "
                 "file_sd format)");
  app.add_option("--metrics-port", f.metrics.port,
                 "Serve Prometheus /metrics on this port (0: off)")
      ->capture_default_str();
  app.add_option("--metrics-host", f.metrics.bind_host, "Address the /metrics endpoint listens on")
      ->capture_default_str();
  add_log_flags(app, f.log);
}

// Checks what CLI11 cannot, reads $DDPD_TOKEN when --token is absent, and converts the
// timeouts. Throws OptionError naming the flag.
void finish_flags(CoordinatorFlags& f) {
  CoordinatorOptions& o = f.options;
  if (o.token.empty()) {
    if (const char* env = std::getenv("DDPD_TOKEN")) o.token = env;
  }
  if (f.tls_cert.empty() != f.tls_key.empty()) {
    throw OptionError("--tls-key", "--tls-cert and --tls-key go together");
  }
  if (f.worker_timeout_s <= 0) throw OptionError("--worker-timeout", "must be > 0");
  if (f.pending_timeout_s < 0) throw OptionError("--pending-timeout", "must be >= 0");
  if (f.adopt_timeout_s <= 0) throw OptionError("--adopt-timeout", "must be > 0");
  if (o.max_pending_jobs < 1) throw OptionError("--max-pending-jobs", "must be >= 1");
  if (o.max_watchers_per_job < 1) throw OptionError("--max-watchers-per-job", "must be >= 1");
  if (o.max_step_reports_per_job < 1) {
    throw OptionError("--max-step-reports-per-job", "must be >= 1");
  }
  if (o.max_message_bytes < 1024) throw OptionError("--max-message-bytes", "must be >= 1024");
  if (o.max_session_queue_bytes < 65536) {
    throw OptionError("--max-session-queue-bytes", "must be >= 65536");
  }
  if (f.metrics.port < 0 || f.metrics.port > 65535) {
    throw OptionError("--metrics-port", "must be 0 (off) or a port up to 65535");
  }
  o.worker_timeout = milliseconds(f.worker_timeout_s);
  o.pending_timeout = milliseconds(f.pending_timeout_s);
  o.adopt_timeout = milliseconds(f.adopt_timeout_s);
}

// Last of the checks, so that a mistyped flag is named before a missing token: without one
// every caller may do anything, which only --insecure asks for.
void require_token(const CoordinatorFlags& f) {
  const CoordinatorOptions& o = f.options;
  if (o.token.empty() && !f.insecure) {
    throw OptionError("--token",
                      "no token: set $DDPD_TOKEN or --token (a shared secret every RPC must "
                      "carry; e.g. export DDPD_TOKEN=$(openssl rand -hex 16)), or pass "
                      "--insecure to serve every caller without one");
  }
  if (!o.token.empty() && f.insecure) {
    throw OptionError("--insecure",
                      "contradicts the token given (--token or $DDPD_TOKEN): "
                      "drop one of them");
  }
}

std::string read_file(const std::string& path, const char* flag) {
  std::ifstream in(path);
  if (!in) throw OptionError(flag, "cannot read '" + path + "'");
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

std::shared_ptr<grpc::ServerCredentials> credentials(const CoordinatorFlags& f) {
  if (f.tls_cert.empty()) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions ssl;
  ssl.pem_key_cert_pairs.push_back(
      {read_file(f.tls_key, "--tls-key"), read_file(f.tls_cert, "--tls-cert")});
  return grpc::SslServerCredentials(ssl);
}

// Null when --listen cannot be bound.
std::unique_ptr<grpc::Server> start_server(const CoordinatorFlags& f, CoordinatorService& service,
                                           CoordinatorMetrics& metrics) {
  grpc::ServerBuilder builder;
  int bound_port = 0;
  builder.AddListeningPort(f.listen, credentials(f), &bound_port);
  // gRPC sets SO_REUSEPORT by default: a second coordinator on a busy --listen would start and
  // take half of the connections. Off, it fails below naming the address.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.SetMaxReceiveMessageSize(f.options.max_message_bytes);
  builder.RegisterService(&service);
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> counters;
  counters.push_back(metrics.rpc_counter());
  builder.experimental().SetInterceptorCreators(std::move(counters));
  auto server = builder.BuildAndStart();
  return server && bound_port != 0 ? std::move(server) : nullptr;
}

volatile std::sig_atomic_t stop_requested = 0;
void on_signal(int) { stop_requested = 1; }

// Serves until SIGINT/SIGTERM; returns the exit code.
int serve(const CoordinatorFlags& f) {
  // Before the store opens: a second coordinator must not touch it (store_lock.h).
  StoreLock store_lock(f.db_path);
  CoordinatorService service(f.options, std::make_unique<JobStore>(f.db_path));
  CoordinatorMetrics metrics(f.metrics, [&service] { return service.state_counts(); });
  service.on_step_report([&metrics] { metrics.count_step_report(); });
  service.on_message_handled(
      [&metrics](const char* kind, double seconds) { metrics.observe_message(kind, seconds); });
  auto server = start_server(f, service, metrics);
  if (!server) {
    spdlog::error("--listen: cannot listen on {} (in use, or not an address of this host)",
                  f.listen);
    return 1;
  }
  spdlog::info("coordinator listening on {} (db {}, tls {}, metrics {})", f.listen, f.db_path,
               f.tls_cert.empty() ? "off" : "on",
               f.metrics.port > 0 ? f.metrics.bind_host + ":" + std::to_string(f.metrics.port)
                                  : std::string("off"));
  if (f.insecure) {
    spdlog::warn(
        "--insecure: no token; every RPC from anyone who reaches {} is accepted "
        "(submit, cancel, the job history). Set $DDPD_TOKEN or --token instead",
        f.listen);
  }
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  while (!stop_requested) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  spdlog::info("shutting down");
  service.shutdown();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ddpd coordinator: worker registry, job queue, rendezvous, job store"};
  CoordinatorFlags flags;
  add_flags(app, flags);
  try {
    app.parse(argc, argv);
    finish_flags(flags);
    configure_logging(flags.log);
    require_token(flags);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  } catch (const OptionError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
  try {
    return serve(flags);
  } catch (const std::exception& e) {
    spdlog::error("coordinator failed: {}", e.what());
    return 1;
  }
}
