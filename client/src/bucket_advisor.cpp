#include "bucket_advisor.h"

#include <algorithm>
#include <cmath>

#include "ddpd/common/overlap_model.h"

namespace ddpd::plan {

std::vector<GradientTensor> transformer_gradients(const ModelConfig& c) {
  const double d = static_cast<double>(c.d_model), ff = static_cast<double>(c.d_ff),
               vocab = static_cast<double>(c.vocab_size);
  const double q_width = static_cast<double>(c.num_heads * c.resolved_head_dim());
  const double kv_width = static_cast<double>(c.kv_heads() * c.resolved_head_dim());
  std::vector<GradientTensor> out;
  auto add = [&](double elements, double compute) { out.push_back({4 * elements, compute}); };
  if (!c.tie_embeddings) add(vocab * d, vocab * d);  // head
  add(d, 0);                                         // final norm
  for (int64_t layer = 0; layer < c.num_layers; ++layer) {
    for (int i = 0; i < 3; ++i) add(d * ff, d * ff);  // w2, w3, w1
    // o, v, k, q (grouped-query attention: k and v are kv_heads wide; q/k/v biases apart)
    add(q_width * d, q_width * d);
    for (int i = 0; i < 2; ++i) add(kv_width * d + (c.qkv_bias ? kv_width : 0), kv_width * d);
    add(q_width * d + (c.qkv_bias ? q_width : 0), q_width * d);
    add(d, 0);  // norm2
    add(d, 0);  // norm1
  }
  add(vocab * d, c.tie_embeddings ? vocab * d : 0);  // embedding (a lookup: no matmul)
  return out;
}

AllReduceTime interpolated_all_reduce_time(std::vector<std::pair<double, double>> points,
                                           double beta) {
  std::sort(points.begin(), points.end());
  return [points, beta](double bytes) {
    if (points.empty()) return bytes / beta;
    if (bytes <= points.front().first) return points.front().second;
    for (size_t k = 1; k < points.size(); ++k) {
      const auto& [x0, y0] = points[k - 1];
      const auto& [x1, y1] = points[k];
      if (bytes <= x1) return y0 + (y1 - y0) * (bytes - x0) / (x1 - x0);
    }
    return points.back().second + (bytes - points.back().first) / beta;
  };
}

double simulated_exposed_s(const std::vector<GradientTensor>& tensors, double backward_s,
                           double bucket_mb, const AllReduceTime& all_reduce_time,
                           double speed_during_backward) {
  double total_compute = 0;
  for (const auto& t : tensors) total_compute += t.compute;
  std::vector<double> ready_s;
  std::vector<int64_t> bytes;
  double done_compute = 0;
  for (const auto& t : tensors) {
    done_compute += t.compute;
    ready_s.push_back(total_compute > 0 ? backward_s * done_compute / total_compute : backward_s);
    bytes.push_back(static_cast<int64_t>(t.bytes));
  }
  LinkQueue link(all_reduce_time, speed_during_backward);
  link.computing(0, backward_s);
  for (const auto& [launch_s, bucket_bytes] : bucket_launches(ready_s, bytes, bucket_mb)) {
    link.run(launch_s, bucket_bytes);
  }
  return std::max(0.0, link.free_at() - backward_s);
}

}  // namespace ddpd::plan
