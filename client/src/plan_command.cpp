#include "plan_command.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>

#include "bucket_advisor.h"
#include "ddpd/common/comm_options.h"
#include "ddpd/common/hf_config.h"
#include "ddpd/common/job_options.h"
#include "ddpd/common/result_json.h"

namespace ddpd::client {

void add_plan_flags(CLI::App& app, PlanFlags& f) {
  app.add_option("--d-model", f.model.d_model, "FFN model width")->capture_default_str();
  app.add_option("--d-ff", f.model.d_ff, "FFN hidden size")->capture_default_str();
  app.add_option("--blocks", f.model.blocks, "Blocks of two linears")->capture_default_str();
  app.add_option("--tokens", f.activation_tokens, "Tokens per device whose activations are kept")
      ->capture_default_str();
  app.add_option("--device-memory-gb", f.device_memory_gb, "Memory per device, GB (1e9 B)")
      ->capture_default_str();
  app.add_option("--fsdp", f.fsdp, "Show per-device memory at this FSDP degree");
  app.add_option("--x", f.x, "FSDP degree of the mesh")->capture_default_str();
  app.add_option("--y", f.y, "TP degree of the mesh")->capture_default_str();
  app.add_option("--flops", f.flops, "Device FLOP/s")->capture_default_str();
  app.add_option("--bandwidth", f.bandwidth, "Interconnect bytes/s (W_ici)")->capture_default_str();
  app.add_option("--mx", f.m_x, "Links along the FSDP axis (M_X)")->capture_default_str();
  app.add_option("--my", f.m_y, "Links along the TP axis (M_Y)")->capture_default_str();
  app.add_flag("--json", f.json, "Print JSON");
}

void add_memory_flags(CLI::App& app, MemoryFlags& f) {
  app.add_option("--d-model", f.model.d_model, "Model width")->capture_default_str();
  app.add_option("--d-ff", f.model.d_ff, "FFN hidden size")->capture_default_str();
  app.add_option("--layers", f.model.layers, "Transformer blocks")->capture_default_str();
  app.add_option("--vocab", f.model.vocab, "Vocabulary")->capture_default_str();
  app.add_flag("--tie-embeddings", f.model.tied, "The LM head shares the embedding's weight");
  app.add_option("--heads", f.model.heads, "Attention heads (0: one of width d_model)");
  app.add_option("--init-from,--from-hf", f.init_from,
                 "A Hugging Face model directory: the shape of its config.json (docs/models.md)");
  app.add_option("--batch", f.batch, "Global batch: the predicted peak's rows")
      ->capture_default_str();
  app.add_option("--context", f.context, "Tokens per row")->capture_default_str();
  app.add_option("--grad-accum", f.grad_accum, "Micro-batches per step")->capture_default_str();
  app.add_option("--attention", f.attention, "naive, flash or sdpa")->capture_default_str();
  app.add_flag("--gloo", f.gloo,
               "Ranks on several hosts: bucketed's buckets are tensors (over shm, the default, "
               "shared memory)");
  app.add_option("--world", f.world, "Ranks")->capture_default_str();
  app.add_option("--fsdp-prefetch", f.prefetch, "fsdp: units gathered ahead")
      ->capture_default_str();
  app.add_flag("--json", f.json, "Print JSON");
}

// The shape `--init-from`'s config.json describes.
static plan::TransformerShape imported_shape(const std::string& dir) {
  const ModelConfig c = model_config_from_hf(read_hf_config(dir), hf_config_path(dir));
  plan::TransformerShape shape;
  shape.d_model = c.d_model;
  shape.d_ff = c.d_ff;
  shape.layers = c.num_layers;
  shape.vocab = c.vocab_size;
  shape.tied = c.tie_embeddings;
  shape.heads = c.num_heads;
  shape.kv_heads = c.kv_heads();
  shape.head_dim = c.resolved_head_dim();
  shape.qkv_bias = c.qkv_bias;
  return shape;
}

// The job `ddpctl plan memory`'s flags describe, as the admission would see it.
static DdpJobOptions peak_job(const MemoryFlags& f) {
  DdpJobOptions job;
  if (!f.init_from.empty()) {
    job.init_from = f.init_from;
  } else {
    job.d_model = f.model.d_model;
    job.d_ff = f.model.d_ff;
    job.num_layers = f.model.layers;
    job.vocab_size = f.model.vocab;
    job.num_heads = f.model.heads > 0 ? f.model.heads : 1;
  }
  job.batch_size = f.batch;
  job.context_length = f.context;
  job.grad_accum = f.grad_accum;
  job.fsdp_prefetch = f.prefetch;
  job.attention = parse_enum<Attention>(f.attention);
  validate(job, static_cast<int>(f.world));
  return job;
}

// Each rank's predicted peak (memory_estimate.h), per strategy and checkpointing: MiB.
static nlohmann::json print_peak_plan(const MemoryFlags& f) {
  const auto rows = plan::peak_memory(peak_job(f), static_cast<int>(f.world), !f.gloo);
  nlohmann::json out = nlohmann::json::array();
  for (const auto& r : rows) {
    out.push_back({{"strategy", "peak:" + r.strategy},
                   {"shard_replicas", r.shard_replicas},
                   {"activation_checkpointing", enum_name(r.checkpointing)},
                   {"peak_bytes", r.estimate.total()},
                   {"tensor_bytes", r.estimate.tensor_bytes()},
                   {"shared_bytes", r.estimate.shared_bytes},
                   {"activation_bytes", r.estimate.activation_bytes},
                   {"phase", r.estimate.phase}});
  }
  if (f.json) return out;
  std::printf(
      "\npredicted peak per rank, MiB (batch %lld, context %lld, %s attention; "
      "bucketed: its buckets included, shared memory over shm; docs/planning.md):\n",
      static_cast<long long>(f.batch), static_cast<long long>(f.context), f.attention.c_str());
  std::printf("  %-18s %9s %11s %11s %11s\n", "strategy", "replicas", "ac none", "selective",
              "block");
  for (size_t i = 0; i + 2 < rows.size(); i += 3) {
    std::printf("  %-18s %9lld %11.1f %11.1f %11.1f\n", rows[i].strategy.c_str(),
                static_cast<long long>(rows[i].shard_replicas),
                rows[i].estimate.total() / 1048576.0, rows[i + 1].estimate.total() / 1048576.0,
                rows[i + 2].estimate.total() / 1048576.0);
  }
  return out;
}

void print_memory_plan(MemoryFlags f) {
  if (!f.init_from.empty()) f.model = imported_shape(f.init_from);
  for (const auto& [flag, value] : {std::pair<const char*, int64_t>{"--d-model", f.model.d_model},
                                    {"--d-ff", f.model.d_ff},
                                    {"--layers", f.model.layers},
                                    {"--vocab", f.model.vocab},
                                    {"--world", f.world}}) {
    if (value <= 0) throw OptionError(flag, "must be > 0");
  }
  if (f.prefetch < 0) throw OptionError("--fsdp-prefetch", "must be >= 0");
  const auto rows = plan::strategy_memory(f.model, f.world, f.prefetch, f.gloo);
  if (f.json) {
    nlohmann::json out = print_peak_plan(f);  // "peak:" rows, then the unsharded accounting
    for (const auto& r : rows) {
      out.push_back({{"strategy", r.strategy},
                     {"peak_parameter_bytes", r.peak_parameter_bytes},
                     {"peak_gradient_bytes", r.peak_gradient_bytes},
                     {"optimizer_bytes", r.optimizer_bytes}});
    }
    std::cout << out.dump(2) << "\n";
    return;
  }
  std::printf("%lld parameters (%.1f MiB fp32), world %lld, per rank, MiB:\n",
              static_cast<long long>(f.model.parameters()), 4.0 * f.model.parameters() / 1048576.0,
              static_cast<long long>(f.world));
  std::printf("  %-18s %14s %14s %12s\n", "strategy", "full params", "full grads", "optimizer");
  for (const auto& r : rows) {
    std::printf("  %-18s %14.1f %14.1f %12.1f\n", r.strategy.c_str(),
                r.peak_parameter_bytes / 1048576.0, r.peak_gradient_bytes / 1048576.0,
                r.optimizer_bytes / 1048576.0);
  }
  print_peak_plan(f);
}

void add_bucket_flags(CLI::App& app, BucketFlags& f) {
  app.add_option("--from-result", f.from_result,
                 "A `ddpd-worker run comm --json` result: its all_reduce alpha and beta");
  app.add_option("--from-job", f.from_job, "A finished comm job: its all_reduce alpha and beta");
  app.add_option("--job", f.job,
                 "A finished DDP job: recommend from its replay at each bucket size (ddpctl "
                 "whatif, docs/whatif.md) instead of the formula");
  app.add_option("--alpha", f.alpha_s, "Per-call all-reduce overhead, seconds");
  app.add_option("--beta", f.beta, "All-reduce bandwidth, bytes/s");
  app.add_option("--model", f.model, "Model preset whose FP32 gradients are bucketed")
      ->capture_default_str();
  app.add_option("--d-model", f.d_model, "Override the preset's d_model");
  app.add_option("--d-ff", f.d_ff, "Override the preset's d_ff");
  app.add_option("--layers", f.num_layers, "Override the preset's layers");
  app.add_option("--vocab", f.vocab_size, "Override the preset's vocabulary");
  app.add_option("--params", f.params, "Parameter count (overrides --model)");
  app.add_option("--backward-ms", f.backward_ms,
                 "Backward's duration: also simulate bucketed DDP's exposed communication for "
                 "the model's tensors in backward order (needs --model, not --params)");
  app.add_option("--comm-speed-during-backward", f.comm_speed_during_backward,
                 "Simulation: the all-reduce's speed while backward computes, as a fraction of "
                 "its speed alone (0.5: compute saturates the cores; 1: spare cores)")
      ->capture_default_str();
  app.add_flag("--json", f.json, "Print JSON");
}

void print_plan(const PlanFlags& f) {
  if (f.model.d_model <= 0) throw OptionError("--d-model", "must be > 0");
  if (f.model.d_ff <= 0) throw OptionError("--d-ff", "must be > 0");
  if (f.model.blocks <= 0) throw OptionError("--blocks", "must be > 0");
  if (f.device_memory_gb <= 0) throw OptionError("--device-memory-gb", "must be > 0");
  if (f.activation_tokens < 0) throw OptionError("--tokens", "must be >= 0");
  if (f.x < 1) throw OptionError("--x", "must be >= 1");
  if (f.y < 1) throw OptionError("--y", "must be >= 1");
  if (f.flops <= 0) throw OptionError("--flops", "must be > 0");
  if (f.bandwidth <= 0) throw OptionError("--bandwidth", "must be > 0");
  const double device = f.device_memory_gb * 1e9;
  const auto memory = plan::memory_plan(f.model, f.activation_tokens, device);
  const int64_t smallest = plan::smallest_fsdp_degree(memory, device);
  const auto mesh = plan::mesh_plan(f.model, f.x, f.y, f.flops, f.bandwidth, f.m_x, f.m_y);
  if (f.json) {
    nlohmann::json out{{"parameters", f.model.parameters()},
                       {"weights_bytes", memory.weights_bytes},
                       {"gradients_bytes", memory.gradients_bytes},
                       {"optimizer_bytes", memory.optimizer_bytes},
                       {"state_bytes", memory.state_bytes},
                       {"activation_bytes", memory.activation_bytes},
                       {"devices_for_state", memory.devices_for_state},
                       {"smallest_fsdp_degree", smallest},
                       {"min_batch_per_device", mesh.min_batch_per_device},
                       {"min_total_batch", mesh.min_total_batch},
                       {"max_tp_degree", mesh.max_tp_degree},
                       {"tp_compute_bound", mesh.tp_compute_bound}};
    if (f.fsdp > 0) out["fsdp_bytes_per_device"] = plan::fsdp_bytes_per_device(memory, f.fsdp);
    std::cout << out.dump() << std::endl;
    return;
  }
  std::printf("FFN model: d_model %lld, d_ff %lld, %lld blocks: %.4g parameters\n",
              static_cast<long long>(f.model.d_model), static_cast<long long>(f.model.d_ff),
              static_cast<long long>(f.model.blocks), static_cast<double>(f.model.parameters()));
  std::printf("  FP32 master weights   %12.2f GB\n", memory.weights_bytes / 1e9);
  std::printf("  FP32 gradients        %12.2f GB\n", memory.gradients_bytes / 1e9);
  std::printf("  AdamW state (FP32)    %12.2f GB\n", memory.optimizer_bytes / 1e9);
  std::printf("  total                 %12.2f GB = %.0f devices of %.0f GB\n",
              memory.state_bytes / 1e9, memory.devices_for_state, f.device_memory_gb);
  std::printf("  BF16 activations      %12.2f GB for %.0f tokens per device\n",
              memory.activation_bytes / 1e9, f.activation_tokens);
  if (f.fsdp > 0) {
    std::printf("  per device, %lld-way FSDP (half the activations sharded): %.2f GB\n",
                static_cast<long long>(f.fsdp), plan::fsdp_bytes_per_device(memory, f.fsdp) / 1e9);
  }
  if (smallest > 0) {
    std::printf("  smallest FSDP degree fitting %.0f GB: %lld\n", f.device_memory_gb,
                static_cast<long long>(smallest));
  } else {
    std::printf(
        "  no FSDP degree fits %.0f GB: the unsharded half of the activations alone is "
        "too large\n",
        f.device_memory_gb);
  }
  std::printf("Mesh %lld-way FSDP x %lld-way TP (C %.3g FLOP/s, W %.3g B/s, M_X %g, M_Y %g):\n",
              static_cast<long long>(f.x), static_cast<long long>(f.y), f.flops, f.bandwidth, f.m_x,
              f.m_y);
  std::printf("  compute-bound from %.1f tokens per device (total batch %.0f tokens)\n",
              mesh.min_batch_per_device, mesh.min_total_batch);
  std::printf("  TP stays compute-bound up to Y = %.1f: %s\n", mesh.max_tp_degree,
              mesh.tp_compute_bound ? "yes" : "no, TP communication dominates");
}

namespace {

// What the bucket advisor takes from a comm result: the all-reduce's α–β fit and the
// back-to-back rows.
struct AllReduceMeasurements {
  double alpha_s = 0;
  double beta_bytes_per_s = 0;
  std::vector<std::pair<double, double>> back_to_back;  // (bytes, seconds per call)
};

CommBenchResult read_comm_result(const std::string& text, const char* flag) {
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(text);
    // A sweep (`ddpctl local --json comm --world-sizes …`) is an array: use its largest world.
    std::vector<CommBenchResult> results;
    for (const auto& one : json.is_array() ? json : nlohmann::json::array({json})) {
      results.push_back(comm_result_from_json(one));
    }
    if (results.empty()) throw std::runtime_error("an empty sweep");
    return *std::max_element(results.begin(), results.end(), [](const auto& a, const auto& b) {
      return a.world_size < b.world_size;
    });
  } catch (const std::exception& e) {
    throw OptionError(flag, "holds no comm result: " + std::string(e.what()));
  }
}

AllReduceMeasurements measurements(const BucketFlags& f, const std::string& comm_result) {
  const char* flag = f.from_job.empty() ? "--from-result" : "--from-job";
  std::string text = comm_result;
  if (f.from_job.empty()) {
    std::ifstream in(f.from_result);
    if (!in) throw OptionError(flag, "cannot read '" + f.from_result + "'");
    text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  const CommBenchResult result = read_comm_result(text, flag);
  // The back-to-back fit (asynchronous all-reduces with no barrier between them, as DDP issues
  // buckets) is the per-call overhead DDP pays; older results have only the barrier-separated
  // fit, which overstates it.
  AllReduceMeasurements m;
  const LatencyBandwidthFit* fit = nullptr;
  for (const CommSeries series : {CommSeries::kAllReduceBackToBack, CommSeries::kAllReduce}) {
    for (const auto& candidate : result.fits) {
      if (!fit && candidate.collective == series) fit = &candidate;
    }
  }
  if (!fit) throw OptionError(flag, "holds no all_reduce fit");
  if (fit->alpha_s <= 0) {
    throw OptionError(flag,
                      "its all_reduce fit found no per-call overhead (alpha 0); "
                      "measure more sizes, small ones included");
  }
  m.alpha_s = fit->alpha_s;
  m.beta_bytes_per_s = fit->beta_bytes_per_s;
  for (const auto& row : result.rows) {
    if (row.collective == CommSeries::kAllReduceBackToBack) {
      m.back_to_back.emplace_back(static_cast<double>(row.size_bytes), row.time_s);
    }
  }
  return m;
}

void check_bucket_flags(const BucketFlags& f, const AllReduceMeasurements& m) {
  if (m.alpha_s <= 0) throw OptionError("--alpha", "the all-reduce overhead must be > 0 seconds");
  if (m.beta_bytes_per_s <= 0) {
    throw OptionError("--beta", "the all-reduce bandwidth must be > 0 bytes/s");
  }
  if (f.params < 0) throw OptionError("--params", "must be > 0");
  if (f.backward_ms < 0) throw OptionError("--backward-ms", "must be >= 0");
  if (f.comm_speed_during_backward < 0 || f.comm_speed_during_backward > 1) {
    throw OptionError("--comm-speed-during-backward", "must be in [0, 1]");
  }
  if (f.backward_ms > 0 && f.params > 0) {
    throw OptionError("--backward-ms",
                      "the simulation needs the model's shape (--model and its "
                      "overrides), not --params");
  }
}

// The preset with the flags' overrides, resolved as a job resolves its model.
ModelConfig bucket_model(const BucketFlags& f) {
  DdpJobOptions job;
  job.model = f.model;
  job.d_model = f.d_model;
  job.d_ff = f.d_ff;
  job.num_layers = f.num_layers;
  job.vocab_size = f.vocab_size;
  return job.resolved_model();
}

// The predicted overhead (and, with --backward-ms, the simulated exposed time) at 1 to 1000 MB.
nlohmann::json bucket_curve(const BucketFlags& f, const AllReduceMeasurements& m,
                            const ModelConfig& config, double gradient_bytes) {
  const double alpha = m.alpha_s, beta = m.beta_bytes_per_s;
  // The simulation's all-reduce cost: the back-to-back measurements where the result has them,
  // else the fit.
  const plan::AllReduceTime all_reduce_time =
      m.back_to_back.empty() ? plan::AllReduceTime([=](double b) { return alpha + b / beta; })
                             : plan::interpolated_all_reduce_time(m.back_to_back, beta);
  nlohmann::json curve = nlohmann::json::array();
  for (double mb : {1.0, 10.0, 100.0, 1000.0}) {
    const double bucket = mb * (1 << 20);
    nlohmann::json point{
        {"bucket_mb", mb},
        {"overhead_seconds", plan::predicted_overhead_s(gradient_bytes, beta, alpha, bucket)}};
    if (f.backward_ms > 0) {
      point["simulated_exposed_seconds"] =
          plan::simulated_exposed_s(plan::transformer_gradients(config), f.backward_ms / 1e3, mb,
                                    all_reduce_time, f.comm_speed_during_backward);
    }
    curve.push_back(point);
  }
  return curve;
}

}  // namespace

void print_bucket_plan(const BucketFlags& f, const std::string& comm_result) {
  AllReduceMeasurements m;
  m.alpha_s = f.alpha_s;
  m.beta_bytes_per_s = f.beta;
  if (!f.from_result.empty() || !f.from_job.empty()) m = measurements(f, comm_result);
  check_bucket_flags(f, m);
  const double alpha = m.alpha_s, beta = m.beta_bytes_per_s;
  const ModelConfig config = bucket_model(f);
  const double gradient_bytes = 4.0 * (f.params > 0 ? f.params : count_parameters(config));
  const double best = plan::recommended_bucket_bytes(gradient_bytes, beta, alpha);
  const nlohmann::json curve = bucket_curve(f, m, config, gradient_bytes);
  if (f.json) {
    std::cout << nlohmann::json{{"model", f.params > 0 ? "custom" : f.model},
                                {"gradient_bytes", gradient_bytes},
                                {"alpha_seconds", alpha},
                                {"beta_bytes_per_second", beta},
                                {"recommended_bucket_bytes", best},
                                {"recommended_overhead_seconds",
                                 plan::predicted_overhead_s(gradient_bytes, beta, alpha, best)},
                                {"curve", curve}}
                     .dump()
              << std::endl;
    return;
  }
  const std::string model_name =
      f.params > 0 ? std::to_string(f.params) + " parameters" : "model " + f.model;
  std::printf("%s: %.1f MB of FP32 gradients; all-reduce alpha %.1f us, beta %.3f GB/s\n",
              model_name.c_str(), gradient_bytes / (1 << 20), alpha * 1e6, beta / 1e9);
  std::printf("recommended bucket: sqrt(s*w*o) = %.1f MB (overhead after backward %.1f ms)\n",
              best / (1 << 20),
              plan::predicted_overhead_s(gradient_bytes, beta, alpha, best) * 1e3);
  for (const auto& point : curve) {
    std::printf("  bucket %6.0f MB: predicted overhead %8.1f ms", point["bucket_mb"].get<double>(),
                point["overhead_seconds"].get<double>() * 1e3);
    if (point.contains("simulated_exposed_seconds")) {
      std::printf("   simulated exposed after a %.0f ms backward %8.1f ms", f.backward_ms,
                  point["simulated_exposed_seconds"].get<double>() * 1e3);
    }
    std::printf("\n");
  }
}

}  // namespace ddpd::client
