#include "ddpd/common/ddp_flags.h"

#include <charconv>
#include <climits>
#include <limits>
#include <type_traits>

#include "ddpd/common/job_option_table.h"

namespace ddpd {
namespace {

// An integer flag's text, checked before CLI11 converts it: CLI11 saturates a value out of the
// type's range (--steps 99999999999999999999 became INT64_MAX) and wraps a negative one into an
// unsigned type (--seed -1 became 2^64 - 1). Whether the value makes sense is validate()'s.
CLI::Validator integer_text(int64_t lo, int64_t hi) {
  return CLI::Validator(
      [lo, hi](std::string& text) -> std::string {
        int64_t value = 0;
        const char* end = text.data() + text.size();
        const auto [ptr, ec] = std::from_chars(text.data(), end, value);
        if (ec == std::errc() && ptr == end && value >= lo && value <= hi) return "";
        return "'" + text + "' is not an integer in " + std::to_string(lo) + ".." +
               std::to_string(hi);
      },
      "INT");
}

// A text flag whose default is not empty refuses '': the API reads an empty string as "unset"
// (proto3), so `--strategy ''` used to run as the default and show a blank strategy.
const CLI::Validator& non_empty() {
  static const CLI::Validator check(
      [](std::string& text) -> std::string { return text.empty() ? "must not be empty" : ""; },
      "NAME");
  return check;
}

// An enum flag: its name is parsed when the flag is given (an OptionError naming it otherwise),
// and --help shows the default's name.
template <typename E>
CLI::Option* add_enum_option(CLI::App& app, E& value, const std::string& help) {
  return app
      .add_option_function<std::string>(
          EnumInfo<E>::kFlag, [&value](const std::string& name) { value = parse_enum<E>(name); },
          help)
      ->default_str(enum_name(value));
}

// Declares one option of the table (job_option_table.h) as its flag: the value's type says how
// it is read and which integers its text may hold (CLI11 saturates a value out of range and
// wraps a negative one into an unsigned type; whether it makes sense is validate()'s).
struct FlagDeclaration {
  CLI::App& app;
  DdpJobOptions& options;

  template <typename T>
  void operator()(const JobOption<T>& entry) const {
    T& value = options.*(entry.member);
    if constexpr (std::is_same_v<T, bool>) {
      if (!value) {
        app.add_flag(entry.flag, value, entry.help);
      } else {  // on by default: the flag takes true or false
        app.add_option(entry.flag, value, entry.help)->capture_default_str();
      }
    } else if constexpr (std::is_same_v<T, std::string>) {
      auto* added = app.add_option(entry.flag, value, entry.help)->capture_default_str();
      if (!value.empty()) added->check(non_empty());
    } else if constexpr (std::is_same_v<T, std::optional<int64_t>>) {
      app.add_option(entry.flag, value, entry.help)->check(integer_text(INT64_MIN, INT64_MAX));
    } else if constexpr (HasEnumNames<T>::value) {
      add_enum_option(app, value, entry.help)->check(non_empty());
    } else if constexpr (std::is_integral_v<T>) {
      declare_integer(entry, value);
    } else {
      app.add_option(entry.flag, value, entry.help)->capture_default_str();
    }
  }

  template <typename T>
  void declare_integer(const JobOption<T>& entry, T& value) const {
    if (entry.parse != nullptr) {  // a number with units (--max-shard-size 5GB)
      const auto parse = entry.parse;
      app.add_option_function<std::string>(
             entry.flag, [&value, parse](const std::string& text) { value = parse(text); },
             entry.help)
          ->default_str(entry.format(value));
      return;
    }
    const int64_t lo = std::is_signed_v<T> ? std::numeric_limits<T>::min() : 0;
    const int64_t hi = static_cast<int64_t>(
        std::min<uint64_t>(std::numeric_limits<T>::max(), std::numeric_limits<int64_t>::max()));
    app.add_option(entry.flag, value, entry.help)
        ->capture_default_str()
        ->check(integer_text(lo, hi));
  }
};

// `export`'s --max-shard-size, read as a job's is (job_option_table.h).
void add_max_shard_size_option(CLI::App& app, int64_t& bytes, const std::string& help) {
  app.add_option_function<std::string>(
         "--max-shard-size", [&bytes](const std::string& text) { bytes = parse_shard_size(text); },
         help)
      ->default_str(shard_size_text(bytes));
}

}  // namespace

void add_ddp_flags(CLI::App& app, DdpJobOptions& o) {
  // A repeated flag overrides the earlier one, so wrappers can append to a base command line.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  for_each_job_option(FlagDeclaration{app, o});
}

void add_export_flags(CLI::App& app, ExportOptions& o) {
  app.add_option("checkpoint", o.checkpoint,
                 "A ddpd checkpoint: DIR/step-N, or a --checkpoint-dir (its latest)")
      ->required();
  app.add_option("--hf", o.hf_dir, "The Hugging Face model directory to write")->required();
  add_max_shard_size_option(app, o.max_shard_bytes,
                            "The largest safetensors file before sharding (decimal units)");
  app.add_flag("--force", o.force,
               "Write into a --hf directory that is not empty, replacing its model files");
}

void add_comm_flags(CLI::App& app, CommBenchOptions& o) {
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_option_function<std::vector<std::string>>(
         "--collective",
         [&o](const std::vector<std::string>& names) {
           o.collectives.clear();
           for (const auto& name : names) o.collectives.push_back(parse_enum<Collective>(name));
         },
         "all_reduce, all_gather, reduce_scatter, broadcast (several: comma-separated)")
      ->delimiter(',')
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
      ->default_str(enum_name(Collective::kAllReduce));
  app.add_option_function<std::string>(
      "--sizes", [&o](const std::string& list) { o.sizes_bytes = parse_sizes(list); },
      "Buffer sizes, e.g. 1MB,10MB,100MB,1GB (units B, KB, MB, GB; binary)");
  add_enum_option(app, o.dtype, "float32 or bfloat16");
  app.add_option("--warmup", o.warmup, "Untimed iterations per size")->capture_default_str();
  app.add_option("--iters", o.iters, "Timed iterations per size")->capture_default_str();
  app.add_flag("--shared-buffers", o.shared_buffers,
               "all_reduce on buffers every rank maps, read in place (shm transport)");
}

void add_comm_job_flags(CLI::App& app, CommJob& job) {
  add_comm_flags(app, job.bench);
  add_enum_option(app, job.backend, "gloo or nccl");
  add_enum_option(app, job.transport, "gloo backend: auto | gloo | shm");
  app.add_option("--timeout", job.collective_timeout_s, "Collective timeout, seconds")
      ->capture_default_str();
}

}  // namespace ddpd
