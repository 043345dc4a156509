#include "render.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <ctime>
#include <sstream>

#include "ddpd/api/spec_convert.h"
#include "ddpd/common/comm_table.h"
#include "ddpd/common/hf_config.h"
#include "ddpd/common/result_json.h"
#include "measured_job.h"

namespace ddpd::client {
namespace {

template <typename... Args>
std::string format(const char* fmt, Args... args) {
  char buf[512];
  std::snprintf(buf, sizeof(buf), fmt, args...);
  return buf;
}

std::string clock_time(double unix_time) {
  const std::time_t t = static_cast<std::time_t>(unix_time);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S", std::localtime(&t));
  return buf;
}

// A preset's name, or an imported model's (--init-from) by its Hugging Face name and shape:
// "tiny-llama (llama, d_model 64, 2 layers, 4 heads, vocab 512; --init-from DIR)". The name is
// config.json's _name_or_path, else the directory's; the shape is read where that directory is
// readable from here (ddpctl local, a shared filesystem), else left out.
std::string model_text(const v1::DdpSpec& ddp) {
  if (ddp.init_from().empty()) return ddp.model().empty() ? kJobDefaults.model : ddp.model();
  std::string dir = ddp.init_from();
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  std::string name = dir.substr(dir.find_last_of('/') + 1);
  std::string shape;
  try {
    const nlohmann::json config = read_hf_config(dir);
    const ModelConfig m = model_config_from_hf(config, hf_config_path(dir));
    const auto given = config.find("_name_or_path");
    if (given != config.end() && given->is_string() && !given->get<std::string>().empty()) {
      name = given->get<std::string>();
    }
    shape = config.value("model_type", std::string("hf")) +
            format(", d_model %ld, %ld layers, %ld heads, vocab %ld; ",
                   static_cast<long>(m.d_model), static_cast<long>(m.num_layers),
                   static_cast<long>(m.num_heads), static_cast<long>(m.vocab_size));
  } catch (const std::exception&) {  // not readable from here: the name and the path
  }
  return name + " (" + shape + "--init-from " + ddp.init_from() + ")";
}

// The age of a rank's oldest pending collective: as reported, plus the time since the report
// while the job runs.
double pending_age(const v1::Job& job, const v1::RankStatus& r, double now_unix) {
  const double age = r.progress().oldest_pending().age_seconds();
  if (job.state() != v1::RUNNING || r.progress_unix_time() <= 0) return age;
  return age + std::max(0.0, now_unix - r.progress_unix_time());
}

// "running" for RANK_RUNNING: the enum's name without its prefix, as diagnose has always shown it.
std::string rank_state(v1::RankState state) {
  std::string name = v1::RankState_Name(state);
  if (name.rfind("RANK_", 0) == 0) name = name.substr(5);
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return name;
}

nlohmann::json rank_json(const v1::Job& job, const v1::RankStatus& r, double now_unix) {
  nlohmann::json out{
      {"rank", r.rank()}, {"worker_id", r.worker_id()}, {"state", rank_state(r.state())}};
  const auto& p = r.progress();
  out["phase"] = r.has_progress() ? nlohmann::json(p.phase()) : nlohmann::json(nullptr);
  out["step"] = r.has_progress() ? nlohmann::json(p.step()) : nlohmann::json(nullptr);
  out["last_enqueued"] = p.last_enqueued();
  out["last_completed"] = p.last_completed();
  if (p.has_oldest_pending()) {
    const auto& c = p.oldest_pending();
    out["oldest_pending"] = {{"seq", c.seq()},     {"op", c.op()},
                             {"tag", c.tag()},     {"numel", c.numel()},
                             {"dtype", c.dtype()}, {"age_seconds", pending_age(job, r, now_unix)}};
  } else {
    out["oldest_pending"] = nullptr;
  }
  out["compute_score"] =
      r.has_compute_score() ? nlohmann::json(r.compute_score()) : nlohmann::json(nullptr);
  return out;
}

std::string scores_text(const google::protobuf::RepeatedField<double>& scores) {
  std::string text;
  for (double s : scores) text += (text.empty() ? "" : " ") + format("%.2f", s);
  return text;
}

}  // namespace

nlohmann::json diagnosis_json(const v1::Job& job, double now_unix) {
  nlohmann::json out{{"job_id", job.job_id()},
                     {"state", v1::JobState_Name(job.state())},
                     {"live", job.state() == v1::RUNNING}};
  auto& ranks = out["ranks"] = nlohmann::json::array();
  for (const auto& r : job.ranks()) ranks.push_back(rank_json(job, r, now_unix));
  return out;
}

std::string diagnosis_table(const v1::Job& job, double now_unix) {
  std::ostringstream out;
  out << "job " << job.job_id() << "  " << v1::JobState_Name(job.state()) << "  "
      << (job.state() == v1::RUNNING ? "live (last heartbeats)" : "as last recorded") << "\n";
  if (job.ranks_size() == 0) {
    out << (job.pending_reason().empty() ? "no ranks (never scheduled)"
                                         : "pending: " + job.pending_reason())
        << "\n";
    return out.str();
  }
  out << format("%-5s %-16s %-10s %-10s %-6s %-9s %-9s %-40s %-8s %s\n", "RANK", "WORKER", "STATE",
                "PHASE", "STEP", "ENQUEUED", "COMPLETED", "OLDEST PENDING", "AGE", "SCORE");
  for (const auto& r : job.ranks()) {
    const auto& p = r.progress();
    std::string pending = "-", age = "-";
    if (p.has_oldest_pending()) {
      const auto& c = p.oldest_pending();
      pending = c.op() + " #" + std::to_string(c.seq()) + " (" + c.tag() + ", " +
                std::to_string(c.numel()) + " × " + c.dtype() + ")";
      age = format("%.1f s", pending_age(job, r, now_unix));
    }
    out << format("%-5d %-16s %-10s %-10s %-6s %-9lld %-9lld %-40s %-8s %s\n", r.rank(),
                  r.worker_id().c_str(), rank_state(r.state()).c_str(),
                  r.has_progress() ? p.phase().c_str() : "-",
                  // Counted from 1, as watch's "20/20" counts: the JSON keeps the 0-based index.
                  r.has_progress() ? std::to_string(p.step() + 1).c_str() : "-",
                  static_cast<long long>(p.last_enqueued()),
                  static_cast<long long>(p.last_completed()), pending.c_str(), age.c_str(),
                  r.has_compute_score() ? format("%.2f", r.compute_score()).c_str() : "-");
  }
  return out.str();
}

nlohmann::json job_json(const v1::GetJobReply& reply) {
  const v1::Job& job = reply.job();
  nlohmann::json out = job.result_json().empty() ? nlohmann::json::object()
                                                 : nlohmann::json::parse(job.result_json());
  out["job_id"] = job.job_id();
  out["state"] = v1::JobState_Name(job.state());
  if (!job.error().empty()) out["error"] = job.error();
  if (!job.pending_reason().empty()) out["pending_reason"] = job.pending_reason();
  out["world_size"] = job.spec().world_size();
  out["spec"] = spec_json(job.spec());  // what `ddpctl whatif --from-file` replays it as
  out["attempts"] = job.attempts();
  out["workers"] = std::vector<std::string>(job.worker_ids().begin(), job.worker_ids().end());
  auto& history = out["history"] = nlohmann::json::array();
  for (const auto& t : job.history()) {
    history.push_back({{"state", v1::JobState_Name(t.state())},
                       {"unix_time", t.unix_time()},
                       {"reason", t.reason()}});
  }
  auto& events = out["events"] = nlohmann::json::array();
  for (const auto& i : job.incidents()) {
    events.push_back({{"unix_time", i.unix_time()},
                      {"kind", i.kind()},
                      {"rank", i.rank()},
                      {"message", i.message()}});
  }
  out["ranks"] = diagnosis_json(job, 0)["ranks"];
  auto& ranks = out["rank_steps"] = nlohmann::json::array();
  for (const auto& s : reply.steps()) {
    ranks.push_back(
        {{"rank", s.rank()},
         {"step", s.step()},
         {"attempt", s.attempt()},
         {"checkpoint_seconds", s.checkpoint_seconds()},
         {"lr", s.lr()},
         {"grad_norm", s.has_grad_norm() ? nlohmann::json(s.grad_norm()) : nlohmann::json(nullptr)},
         {"eval_loss", s.has_eval_loss() ? nlohmann::json(s.eval_loss()) : nlohmann::json(nullptr)},
         {"loss", s.loss()},
         {"step_seconds", s.step_seconds()},
         {"forward_seconds", s.forward_seconds()},
         {"backward_seconds", s.backward_seconds()},
         {"optimizer_seconds", s.optimizer_seconds()},
         {"comm_seconds", s.comm_seconds()},
         {"exposed_comm_seconds", s.exposed_comm_seconds()},
         {"comm_fraction", s.comm_fraction()},
         {"param_spread",
          s.has_param_spread() ? nlohmann::json(s.param_spread()) : nlohmann::json(nullptr)},
         {"first_sample", s.first_sample()},
         {"samples", s.samples()}});
  }
  return out;
}

std::string steps_csv(const v1::GetJobReply& reply) {
  std::ostringstream out;
  out << "rank,step,loss,step_seconds,forward_seconds,backward_seconds,optimizer_seconds,"
         "comm_seconds,exposed_comm_seconds,comm_fraction,param_spread\n";
  for (const auto& s : reply.steps()) {
    out << s.rank() << ',' << s.step() << ',' << s.loss() << ',' << s.step_seconds() << ','
        << s.forward_seconds() << ',' << s.backward_seconds() << ',' << s.optimizer_seconds() << ','
        << s.comm_seconds() << ',' << s.exposed_comm_seconds() << ',' << s.comm_fraction() << ',';
    if (s.has_param_spread()) out << s.param_spread();
    out << '\n';
  }
  return out.str();
}

std::string job_summary(const v1::GetJobReply& reply) {
  const v1::Job& job = reply.job();
  std::ostringstream out;
  out << "job " << job.job_id() << "  " << v1::JobState_Name(job.state()) << "  world size "
      << job.spec().world_size();
  if (job.spec().has_ddp()) {
    out << "  model " << model_text(job.spec().ddp()) << "  strategy "
        << job.spec().ddp().strategy();
    if (from_proto(job.spec().ddp()).device == Device::kCuda) out << "  device cuda";
  }
  out << "\n";
  for (const auto& t : job.history()) {
    out << "  " << clock_time(t.unix_time()) << "  "
        << format("%-9s", v1::JobState_Name(t.state()).c_str()) << "  " << t.reason() << "\n";
  }
  if (!job.pending_reason().empty()) out << "  pending: " << job.pending_reason() << "\n";
  if (job.attempts() > 1) {
    out << "  attempts: " << job.attempts() << " (restart events below)\n";
  }
  for (const auto& i : job.incidents()) {
    out << "  " << clock_time(i.unix_time()) << "  " << format("%-9s", i.kind().c_str()) << "  "
        << i.message() << "\n";
  }
  if (job.ranks_size() > 0 && job.ranks(0).has_compute_score()) {
    out << "  compute score by rank:";
    for (const auto& r : job.ranks()) out << format(" %.2f", r.compute_score());
    out << "  (1: as fast as the other ranks' median or faster; ddpctl diagnose for more)\n";
  }
  if (!job.error().empty()) out << "error: " << job.error() << "\n";
  if (!job.result_json().empty() && job.spec().has_comm()) {
    out << comm_table(comm_result_from_json(nlohmann::json::parse(job.result_json())));
  } else if (!job.result_json().empty()) {
    const nlohmann::json raw = nlohmann::json::parse(job.result_json());
    const TrainingResult result = training_result_from_json(raw);
    if (const auto from = raw.find("resumed_from"); from != raw.end() && from->is_object()) {
      out << "resumed from step " << from->value("step", int64_t{0}) << " ("
          << from->value("checkpoint", std::string()) << ")\n";
    }
    const TrainingSummary& s = result.summary;
    if (!s.final_loss) {
      out << "no step trained: no loss and no step times\n";
    } else {
      out << format(
          "final loss %.4f  median step %.1f ms (std %.1f)  %.0f tokens/s  comm fraction %.3f  "
          "max param spread %.3g\n",
          *s.final_loss, s.median_step_seconds * 1e3, s.std_step_seconds * 1e3, s.tokens_per_second,
          s.median_comm_fraction, s.max_param_spread);
    }
    out << "memory (rank 0)      params      grads  optimizer       peak\n";
    const std::pair<const char*, const MemoryBytes*> points[] = {
        {"after_init", &result.memory.after_init},
        {"before_step", &result.memory.before_step},
        {"after_step", &result.memory.after_step}};
    for (const auto& [point, m] : points) {
      out << format("  %-12s %10.2f %10.2f %10.2f %10.2f MB\n", point, m->param_bytes / 1e6,
                    m->grad_bytes / 1e6, m->optimizer_state_bytes / 1e6, m->peak_bytes / 1e6);
    }
    // The allocator's counts (docs/metrics.md#memory): 0 from a result written before them.
    if (result.memory.step_peak_tensor_bytes > 0) {
      out << format("  last step's peak: tensors %.2f MB, activations %.2f MB\n",
                    result.memory.step_peak_tensor_bytes / 1e6,
                    result.memory.step_peak_activation_bytes / 1e6);
    }
  }
  return out.str();
}

std::string event_line(const v1::JobEvent& event) {
  if (event.has_transition()) {
    const auto& t = event.transition();
    return clock_time(t.unix_time()) + "  " + v1::JobState_Name(t.state()) + "  " + t.reason();
  }
  if (event.has_incident()) {
    const auto& i = event.incident();
    return clock_time(i.unix_time()) + "  " + i.kind() + "  " + i.message();
  }
  if (event.has_pending()) {
    return clock_time(event.pending().unix_time()) + "  pending  " + event.pending().reason();
  }
  const auto& s = event.step();
  const int64_t total = std::max<int64_t>(event.total_steps(), 1);
  const int filled = static_cast<int>(20 * (s.step() + 1) / total);
  std::string bar = "[" + std::string(filled, '#') + std::string(20 - filled, '.') + "]";
  std::string line = format(
      "%s step %ld/%ld  loss %.4f  step %.1f ms  comm fraction %.3f  spread %s", bar.c_str(),
      static_cast<long>(s.step() + 1), static_cast<long>(total), s.loss(), s.step_seconds() * 1e3,
      s.comm_fraction(), s.has_param_spread() ? format("%.2g", s.param_spread()).c_str() : "-");
  if (s.has_eval_loss()) line += format("  held-out loss %.4f", s.eval_loss());
  if (event.compute_scores_size() > 0) line += "  scores " + scores_text(event.compute_scores());
  return line;
}

std::string jobs_table(const v1::ListJobsReply& jobs) {
  std::ostringstream out;
  out << format("%-12s %-10s %-5s %-6s %-10s %-20s %s\n", "JOB", "STATE", "KIND", "WORLD",
                "STRATEGY", "SUBMITTED", "REASON");
  for (const auto& job : jobs.jobs()) {
    const std::string submitted = job.history_size() ? clock_time(job.history(0).unix_time()) : "";
    const std::string reason = !job.pending_reason().empty() ? job.pending_reason()
                               : job.history_size() ? job.history(job.history_size() - 1).reason()
                                                    : "";
    out << format("%-12s %-10s %-5s %-6d %-10s %-20s %s\n", job.job_id().c_str(),
                  v1::JobState_Name(job.state()).c_str(), kind_name(job.spec()).c_str(),
                  job.spec().world_size(), job.spec().ddp().strategy().c_str(), submitted.c_str(),
                  reason.c_str());
  }
  return out.str();
}

std::string workers_table(const v1::ListWorkersReply& workers) {
  std::ostringstream out;
  // STATE is as wide as its longest value, DISCONNECTED.
  out << format("%-20s %-12s %-12s %-22s %-5s %-5s %-10s %s\n", "WORKER", "STATE", "JOB", "ADDRESS",
                "CPUS", "GPUS", "BACKENDS", "LAST SEEN");
  for (const auto& w : workers.workers()) {
    const std::string address =
        w.hello().advertised_host() + ":" + std::to_string(w.hello().rendezvous_port());
    std::string backends;
    for (const auto& b : w.hello().backends()) backends += (backends.empty() ? "" : ",") + b;
    out << format(
        "%-20s %-12s %-12s %-22s %-5d %-5d %-10s %s\n", w.hello().worker_id().c_str(),
        v1::WorkerState_Name(w.state()).c_str(), w.job_id().empty() ? "-" : w.job_id().c_str(),
        address.c_str(), w.hello().cpu_count(), w.hello().gpu_count(),
        backends.empty() ? "gloo" : backends.c_str(), clock_time(w.last_seen_unix_time()).c_str());
  }
  return out.str();
}

}  // namespace ddpd::client
