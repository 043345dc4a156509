// Benchmark (not a test): what the collective journal costs. Every collective records one
// enqueue and one completion; the worker daemon's heartbeat reads progress() every few seconds.
// Prints the cost per collective alone and with a reader polling progress() every millisecond
// (far more often than any heartbeat), and that cost as a share of a step that launches
// COLLECTIVES_PER_STEP collectives in STEP_MS milliseconds.
//   ddpd-bench-journal [COLLECTIVES_PER_STEP] [STEP_MS]   (defaults: 7 collectives in 346 ms,
//   tests/bench/bench_ddp.sh's bucketed+ZeRO-1 step at 2 ranks on this machine: 2 bucket
//   all-reduces, 2 owner broadcasts, the loss, the spread's max and min, from its journal)
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "ddpd/core/collective_journal.h"

namespace {

using Clock = std::chrono::steady_clock;

// Nanoseconds per collective (enqueue + complete), over `count` collectives.
double record_ns(ddpd::CollectiveJournal& journal, int count) {
  const auto start = Clock::now();
  for (int i = 0; i < count; ++i) {
    const int64_t seq = journal.enqueue("all_reduce", "bucket3", 1 << 20, "float", 1.0);
    journal.complete(seq, 2.0);
  }
  return std::chrono::duration<double, std::nano>(Clock::now() - start).count() / count;
}

}  // namespace

int main(int argc, char** argv) {
  const double per_step = argc > 1 ? std::atof(argv[1]) : 7;
  const double step_ms = argc > 2 ? std::atof(argv[2]) : 346;
  constexpr int kCount = 2'000'000;

  ddpd::CollectiveJournal journal;  // the default 2,000 entries
  record_ns(journal, 100'000);      // warm up
  const double alone = record_ns(journal, kCount);

  std::atomic<bool> stop{false};
  int64_t reads = 0;
  std::thread reader([&] {
    while (!stop.load()) {
      reads += journal.progress().last_enqueued > 0;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  const double contended = record_ns(journal, kCount);
  stop = true;
  reader.join();

  const double share = per_step * contended * 1e-9 / (step_ms * 1e-3);
  std::printf(
      "collective journal: %.0f ns per collective (enqueue + complete), %.0f ns with "
      "progress() read every 1 ms (%ld reads)\n",
      alone, contended, static_cast<long>(reads));
  std::printf(
      "step of %.0f collectives in %.0f ms: %.2f us of journal = %.5f %% of the step "
      "(budget 1 %%)\n",
      per_step, step_ms, per_step * contended * 1e-3, 100 * share);
  return share < 0.01 ? 0 : 1;
}
