// The coordinator's options: one struct, each default named once (ddpd-coordinator's flags set
// them; docs/protocols.md lists the limits).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace ddpd::coordinator {

struct CoordinatorOptions {
  std::string token;                                // required on every RPC; empty: none
  std::chrono::milliseconds worker_timeout{15000};  // no heartbeat for this long → lost
  std::chrono::milliseconds pending_timeout{0};     // pending longer → FAILED (0: wait)
  // Limits, each refused with RESOURCE_EXHAUSTED naming it when exceeded (docs/protocols.md).
  int64_t max_pending_jobs = 10000;  // SubmitJob while this many jobs are PENDING
  int max_watchers_per_job = 64;     // concurrent WatchJob streams on one job
  // Step reports stored per job (every rank's, every step); later ones are dropped, with one
  // `limit` incident on the job. 10^7: 1,024 ranks × ~10,000 steps.
  int64_t max_step_reports_per_job = 10000000;
  // Largest request the server accepts, bytes (grpc::ServerBuilder::SetMaxReceiveMessageSize,
  // set by main; gRPC answers RESOURCE_EXHAUSTED above it). 4 MiB, gRPC's own default.
  int max_message_bytes = 4 << 20;
  // Bytes queued for one worker session and not yet taken by gRPC. A worker that stops reading
  // is cancelled (LOST, "stopped reading") once this is passed, rather than blocking the
  // coordinator or growing its memory. 1 MiB holds thousands of assignments.
  int64_t max_session_queue_bytes = 1 << 20;
  // Adoption (docs/protocols.md, "Adoption"): a job found RUNNING in the store at start stays
  // RUNNING while its ranks' daemons register again and claim them, for up to adopt_timeout; a
  // rank not claimed by then is lost. 30 s: a live daemon tries to register at least every 10 s
  // (its backoff's cap), so 30 s gives each three tries, while a rank that really is gone is
  // healed or restarted no later than that. adopt = false (--no-adopt): such jobs restart from
  // their checkpoint, or fail "coordinator restarted" without restarts left (before adoption).
  std::chrono::milliseconds adopt_timeout{30000};
  bool adopt = true;
  // The reaper ticks every 0.5 s: a longer gap between ticks means the coordinator itself did
  // not run (SIGSTOP, a paused VM, swapping), and the silence it saw was its own, not its
  // workers' or jobs'. Their clocks are moved on by the gap. 0: no such check.
  std::chrono::milliseconds own_pause{2000};
  // Prometheus file-based service discovery (prometheus_targets.h); empty: none.
  std::string prometheus_targets;
};

}  // namespace ddpd::coordinator
