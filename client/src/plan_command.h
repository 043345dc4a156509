// The `ddpctl plan` subcommands: flags, and printing the plan module's figures.
#pragma once

#include <CLI/CLI.hpp>

#include <optional>
#include <string>

#include "plan.h"

namespace ddpd::client {

struct PlanFlags {
  plan::FfnModel model;
  double activation_tokens = 0;  // tokens per device whose activations are kept
  double device_memory_gb = 80;  // GB = 1e9 bytes
  int64_t fsdp = 0;              // also show per-device memory at this degree (0: skip)
  int64_t x = 16, y = 4;         // FSDP × TP mesh
  double flops = 4.6e14;         // device FLOP/s (TPU v5p bf16, as the Scaling Book)
  double bandwidth = 1.8e11;     // W_ici, bytes/s (2 × 9e10)
  double m_x = 2, m_y = 1;       // links along each mesh axis
  bool json = false;
};

// `ddpctl plan memory`: per-rank bytes of each strategy on a Transformer.
struct MemoryFlags {
  plan::TransformerShape model;
  std::string init_from;  // a Hugging Face model directory: its config.json gives the shape
  int64_t world = 2;
  int64_t prefetch = 1;
  // The predicted peak's job: the rows and tokens whose activations a rank keeps.
  int64_t batch = kJobDefaults.batch_size;
  int64_t context = kJobDefaults.context_length;
  int64_t grad_accum = 1;
  std::string attention = "naive";
  bool gloo = false;  // ranks on several hosts: bucketed's buckets are tensors, not shm
  bool json = false;
};
void add_memory_flags(CLI::App& app, MemoryFlags& f);
void print_memory_plan(MemoryFlags f);  // by value: --init-from replaces its shape

struct BucketFlags {
  std::string from_result;   // a `ddpd-worker run comm --json` result file
  std::string from_job;      // or a finished comm job on the coordinator
  std::string job;           // or replay a finished DDP job at each bucket size (whatif)
  double alpha_s = 0;        // else: per-call overhead ...
  double beta = 0;           // ... and bandwidth, bytes/s
  std::string model = "xl";  // preset whose FP32 gradients are bucketed
  std::optional<int64_t> d_model, d_ff, num_layers, vocab_size;  // the preset's shape overrides
  int64_t params = 0;  // or this many parameters (overrides --model)
  // Backward's duration for the simulated exposed communication (0: no simulation).
  double backward_ms = 0;
  // The all-reduce's speed while backward computes, as a fraction of its speed alone: 0.5 when
  // compute saturates the cores and the transport's threads get a fair share of them, 1 with
  // spare cores (or a GPU, whose compute leaves the host's cores free).
  double comm_speed_during_backward = 0.5;
  bool json = false;
};

void add_plan_flags(CLI::App& plan, PlanFlags& flags);
void add_bucket_flags(CLI::App& bucket, BucketFlags& flags);
// Print the plans; throw OptionError on bad input.
void print_plan(const PlanFlags& flags);
// comm_result: the comm job's result JSON when --from-job was given (fetched by the caller).
void print_bucket_plan(const BucketFlags& flags, const std::string& comm_result = "");

}  // namespace ddpd::client
