// The replay's link model (step_replay.h, step 2): alpha, beta and the speed while computing
// from a job's own all-reduces, or alpha and beta from a comm job.
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <optional>

#include "ddpd/common/comm_options.h"
#include "ddpd/common/intervals.h"
#include "ddpd/common/step_replay.h"
#include "step_replay_internal.h"

namespace ddpd {
namespace {

// The rank's compute within one profiled step: the last backward, then AdamW per bucket as each
// all-reduce completed (in completion order, run back to back; the step records their total).
std::vector<Interval> computing_intervals(const ProfiledStep& step) {
  std::vector<Interval> busy{{step.last_backward_start_s, step.last_backward_end_s}};
  double reduced = 0;
  for (const auto& c : step.collectives) reduced += c.op == Collective::kAllReduce ? c.bytes : 0;
  if (step.overlapped_optimizer_s <= 0 || reduced <= 0) return busy;
  double at = step.last_backward_end_s;
  for (const auto& c : step.collectives) {
    if (c.op != Collective::kAllReduce) continue;
    const double begin = std::max(at, c.complete_s);
    at = begin + step.overlapped_optimizer_s * c.bytes / reduced;
    busy.push_back({begin, at});
  }
  return busy;
}

constexpr double kSlowestSpeed = 0.02;  // a floor, so that a noisy fit never stalls the link
constexpr double kAlphaSizeSpread = 8;  // largest / smallest all-reduce for alpha to be fitted

}  // namespace

std::vector<LinkSample> link_samples(const MeasuredJob& job) {
  std::vector<LinkSample> samples;
  const auto& steps = job.result.profile.steps;
  const bool any_measured = !steps.empty() && steps.back().step >= job.options.warmup_steps;
  for (const auto& step : steps) {
    if (any_measured && step.step < job.options.warmup_steps) continue;
    const auto busy = computing_intervals(step);
    // The transport runs one collective at a time, in launch order: each one's service starts
    // when it was launched or when the one before it completed, whichever is later.
    double free_at = -std::numeric_limits<double>::infinity();
    for (const auto& c : step.collectives) {
      const double start = std::max(c.launch_s, free_at);
      free_at = std::max(free_at, c.complete_s);
      if (c.op != Collective::kAllReduce || c.complete_s <= start || c.bytes <= 0) continue;
      const double computing = covered_seconds(busy, {start, c.complete_s});
      samples.push_back(
          {static_cast<double>(c.bytes), computing, c.complete_s - start - computing});
    }
  }
  return samples;
}

namespace {

// Least squares of a sample's waiting = alpha + g x bytes - speed x computing: its work at full
// speed while the rank waits and at `speed` while it computes. Absolute residuals: the buckets
// that matter are megabytes, and the wait after backward is what the replay must get right.
// Returns {alpha, g, speed}; without `with_alpha`, alpha is 0 and only g and speed are fitted.
std::optional<std::array<double, 3>> least_squares(const std::vector<LinkSample>& samples,
                                                   bool with_alpha) {
  const int k = with_alpha ? 3 : 2;
  auto row_of = [&](const LinkSample& s, double* row) {
    const double full[3] = {1.0, s.bytes, -s.computing_s};
    for (int i = 0; i < k; ++i) row[i] = full[with_alpha ? i : i + 1];
  };
  // Columns scaled to unit RMS first: bytes (~1e7) beside seconds (~1e-2) would leave the normal
  // equations with a condition number past double's precision.
  double scale[3] = {};
  for (const auto& s : samples) {
    double row[3];
    row_of(s, row);
    for (int i = 0; i < k; ++i) scale[i] += row[i] * row[i];
  }
  for (int i = 0; i < k; ++i) {
    if (scale[i] <= 0) return std::nullopt;
    scale[i] = std::sqrt(scale[i] / static_cast<double>(samples.size()));
  }
  double a[3][3] = {}, b[3] = {};
  for (const auto& s : samples) {
    double row[3];
    row_of(s, row);
    for (int i = 0; i < k; ++i) {
      for (int j = 0; j < k; ++j) a[i][j] += row[i] / scale[i] * row[j] / scale[j];
      b[i] += row[i] / scale[i] * s.waiting_s;
    }
  }
  // Gaussian elimination with partial pivoting.
  for (int col = 0; col < k; ++col) {
    int pivot = col;
    for (int r = col + 1; r < k; ++r) {
      if (std::abs(a[r][col]) > std::abs(a[pivot][col])) pivot = r;
    }
    if (std::abs(a[pivot][col]) < 1e-12) return std::nullopt;  // singular: too few distinct rows
    std::swap(a[col], a[pivot]);
    std::swap(b[col], b[pivot]);
    for (int r = 0; r < k; ++r) {
      if (r == col) continue;
      const double factor = a[r][col] / a[col][col];
      for (int c = col; c < k; ++c) a[r][c] -= factor * a[col][c];
      b[r] -= factor * b[col];
    }
  }
  std::array<double, 3> x{};
  for (int i = 0; i < k; ++i) x[with_alpha ? i : i + 1] = b[i] / a[i][i] / scale[i];
  return x;
}

}  // namespace

LinkModel fit_link_from_job(const MeasuredJob& job) {
  const auto samples = link_samples(job);
  const bool two_sizes = std::any_of(samples.begin(), samples.end(), [&](const LinkSample& s) {
    return s.bytes != samples.front().bytes;
  });
  auto refuse = [&](const std::string& why) {
    return ReplayRefused("job " + job.job_id + " has " + std::to_string(samples.size()) +
                         " all-reduces " + why +
                         ": pass a comm job on the same transport (--link-from COMM_JOB)");
  };
  if (samples.size() < 3 || !two_sizes) throw refuse("(too few, or of one size) to fit a link");
  // alpha only where the sizes make it identifiable: an intercept extrapolated from megabyte
  // buckets is noise (1.0 ms from 10-17 MB buckets here, against tens of microseconds from a comm
  // job), and naive and overlap, which pay it once per parameter, were then mispredicted by 23%.
  const auto [smallest, largest] = std::minmax_element(
      samples.begin(), samples.end(),
      [](const LinkSample& a, const LinkSample& b) { return a.bytes < b.bytes; });
  const bool alpha_identifiable = largest->bytes >= kAlphaSizeSpread * smallest->bytes;
  auto fit = least_squares(samples, alpha_identifiable);
  if (fit && (*fit)[0] < 0) fit = least_squares(samples, false);
  if (!fit || (*fit)[1] <= 0) {
    // Noise the three terms cannot be told apart in (tiny buckets, all of them inside
    // backward): the cost per byte of each service as a whole, at full speed throughout, which
    // is positive whenever the services are.
    double bytes_times_service = 0, bytes_squared = 0;
    for (const auto& s : samples) {
      bytes_times_service += s.bytes * (s.waiting_s + s.computing_s);
      bytes_squared += s.bytes * s.bytes;
    }
    fit = std::array<double, 3>{0.0, bytes_times_service / bytes_squared, 1.0};
  }
  LinkModel link;
  link.transport = job.result.transport;
  link.world_size = job.world_size;
  link.alpha_s = (*fit)[0];
  link.seconds_per_byte = (*fit)[1];
  link.speed_while_computing = std::clamp((*fit)[2], kSlowestSpeed, 1.0);
  double squared = 0;
  for (const auto& s : samples) {
    const double service = s.waiting_s + s.computing_s;
    const double work = link.alpha_s + link.seconds_per_byte * s.bytes;
    const double predicted =
        std::max(work - link.speed_while_computing * s.computing_s, 0.0) + s.computing_s;
    squared += std::pow((predicted - service) / service, 2) / static_cast<double>(samples.size());
  }
  link.rms_relative_error = std::sqrt(squared);
  link.samples = static_cast<int>(samples.size());
  link.source = std::to_string(samples.size()) + " all-reduces of job " + job.job_id;
  return link;
}

LinkModel link_from_comm_job(const CommBenchResult& result, const std::string& job_id) {
  for (const auto& fit : result.fits) {
    if (fit.collective != CommSeries::kAllReduce || fit.beta_bytes_per_s <= 0) continue;
    LinkModel link;
    link.transport = result.transport;
    link.world_size = result.world_size;
    link.alpha_s = fit.alpha_s;
    link.seconds_per_byte = 1.0 / fit.beta_bytes_per_s;
    link.rms_relative_error = fit.rms_relative_error;
    for (const auto& row : result.rows) link.samples += row.collective == CommSeries::kAllReduce;
    link.source = "comm job " + job_id;
    return link;
  }
  throw ReplayRefused("comm job " + job_id + " measured no all_reduce at world size " +
                      std::to_string(result.world_size) + ": run one with --collective all_reduce");
}

}  // namespace ddpd
