// The bucket advisor's simulation: bucketed DDP's exposed communication for one model, bucket
// size, backward time and measured all-reduce cost (docs/planning.md). Pure arithmetic.
#pragma once

#include <functional>
#include <vector>

#include "ddpd/common/job_options.h"

namespace ddpd::plan {

// One trainable tensor as backward produces it: its FP32 gradient bytes and its share of
// backward's compute (matmul weights in proportion to their size; norms and the embedding
// lookup take next to none).
struct GradientTensor {
  double bytes = 0;
  double compute = 0;  // relative units
};

// The Transformer LM's trainable tensors in the order backward makes their gradients ready:
// head, final norm, the blocks from last to first (w2, w3, w1, o, v, k, q, norm2, norm1), the
// embedding. With tied embeddings the head's compute lands on the embedding, ready last.
std::vector<GradientTensor> transformer_gradients(const ModelConfig& config);

// A measured all-reduce cost: seconds per call for `bytes`.
using AllReduceTime = std::function<double(double bytes)>;

// Piecewise-linear through measured (bytes, seconds) points (sorted by bytes); below the
// smallest it is the smallest's time, beyond the largest the largest's plus the extra bytes at
// `beta` bytes/s.
AllReduceTime interpolated_all_reduce_time(std::vector<std::pair<double, double>> points,
                                           double beta);

// Bucketed DDP, simulated by the shared overlap model (ddpd/common/overlap_model.h, which
// whatif's replay runs too): tensor i's gradient is ready at backward_s × (compute of tensors
// 0..i) / (all compute); the tensors are packed into buckets as the core packs them
// (bucket_mb, the first bucket at most 1 MiB); a bucket's all-reduce starts when its last
// gradient is ready and the previous all-reduce has ended, and takes all_reduce_time(its bytes)
// once backward is over; while backward runs it progresses at `speed_during_backward` of that
// rate (compute and the transport's threads share the cores). Returns the seconds from the end
// of backward to the end of the last all-reduce (0 if it ended earlier).
double simulated_exposed_s(const std::vector<GradientTensor>& tensors, double backward_s,
                           double bucket_mb, const AllReduceTime& all_reduce_time,
                           double speed_during_backward);

}  // namespace ddpd::plan
