#include "ddpd/common/checkpoint_facts.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <utility>

namespace ddpd {
namespace {

namespace fs = std::filesystem;

// metadata.json's "model" keys, by the flag that sets each.
constexpr std::pair<const char*, const char*> kShapeKeys[] = {{"--d-model", "d_model"},
                                                              {"--d-ff", "d_ff"},
                                                              {"--layers", "num_layers"},
                                                              {"--heads", "num_heads"},
                                                              {"--vocab", "vocab_size"}};

int64_t shape_value(const ModelConfig& m, const std::string& flag) {
  if (flag == "--d-model") return m.d_model;
  if (flag == "--d-ff") return m.d_ff;
  if (flag == "--layers") return m.num_layers;
  if (flag == "--heads") return m.num_heads;
  return m.vocab_size;
}

// The directory `resume` names, through a `latest` pointer where it has one; "" when none.
std::string checkpoint_directory(const std::string& resume, const std::string& checkpoint_dir) {
  const bool by_pointer = resume == "latest" || resume == "auto";
  const fs::path dir = by_pointer ? fs::path(checkpoint_dir) : fs::path(resume);
  if (dir.empty()) return "";
  std::error_code ec;
  if (fs::exists(dir / "metadata.json", ec)) return dir.string();
  std::ifstream pointer(dir / "latest");
  std::string name;
  if (!pointer || !std::getline(pointer, name) || name.empty()) return "";
  return (dir / name).string();
}

}  // namespace

std::optional<CheckpointFacts> read_checkpoint_facts(const std::string& resume,
                                                     const std::string& checkpoint_dir) {
  if (resume.empty()) return std::nullopt;
  const std::string dir = checkpoint_directory(resume, checkpoint_dir);
  if (dir.empty()) return std::nullopt;
  std::ifstream in(dir + "/metadata.json");
  if (!in) return std::nullopt;
  try {
    const nlohmann::json meta = nlohmann::json::parse(in);
    CheckpointFacts facts;
    facts.dir = dir;
    facts.step = meta.at("step").get<int64_t>();
    facts.data_position = meta.value("data_position", int64_t{0});
    facts.batch_size = facts.step > 0 ? facts.data_position / facts.step : 0;
    if (const auto m = meta.find("model"); m != meta.end() && m->is_object()) {
      for (const auto& [flag, key] : kShapeKeys) {
        facts.shape.push_back({flag, m->value(key, int64_t{0})});
      }
    }
    return facts;
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;  // the rank's reader names what is wrong with it
  }
}

void check_resume(const DdpJobOptions& options, const CheckpointFacts& facts) {
  if (options.steps > 0 && facts.step >= options.steps) {
    throw OptionError(
        "--steps", "the checkpoint " + facts.dir + " has done " + std::to_string(facts.step) +
                       " steps, and --steps " + std::to_string(options.steps) +
                       " is the total: nothing would train. Raise --steps above " +
                       std::to_string(facts.step) + " (or --steps 0 to evaluate and export only)");
  }
  if (!facts.shape.empty()) {
    const ModelConfig model = options.resolved_model();
    for (const auto& field : facts.shape) {
      const int64_t ours = shape_value(model, field.flag);
      if (field.value <= 0 || field.value == ours) continue;
      throw OptionError(field.flag, std::to_string(ours) + " contradicts the checkpoint " +
                                        facts.dir + ", written with " + field.flag + " " +
                                        std::to_string(field.value) + "; resume with " +
                                        field.flag + " " + std::to_string(field.value));
    }
  }
  if (facts.step > 0 && facts.data_position != facts.step * options.batch_size) {
    throw OptionError("--batch",
                      "the checkpoint's data position " + std::to_string(facts.data_position) +
                          " is not " + std::to_string(facts.step) + " global batches of " +
                          std::to_string(options.batch_size) + ": the checkpoint " + facts.dir +
                          " was written with --batch " + std::to_string(facts.batch_size) +
                          "; resume with --batch " + std::to_string(facts.batch_size));
  }
}

}  // namespace ddpd
