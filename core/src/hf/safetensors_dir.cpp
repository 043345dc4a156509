// A model directory's safetensors weights: one file, or shards and their index (safetensors_dir.h).
#include "hf/safetensors_dir.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

namespace ddpd::hf {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

std::string join(const std::string& dir, const std::string& name) {
  return (fs::path(dir) / name).string();
}

bool is_file(const std::string& path) {
  std::error_code error;
  return fs::is_regular_file(path, error);
}

// The refusal for a directory without safetensors weights: names pickled weights when there are
// some, with the one command that converts them.
SafetensorsError no_weights_error(const std::string& dir) {
  std::error_code error;
  for (const auto& item : fs::directory_iterator(dir, error)) {
    const std::string name = item.path().filename().string();
    if (name.rfind("pytorch_model", 0) == 0 && name.size() > 4 &&
        name.compare(name.size() - 4, 4, ".bin") == 0) {
      return SafetensorsError(
          item.path().string(), "",
          "pickled PyTorch weights, which ddpd does not read (safetensors only); convert them "
          "once with: python -c \"from transformers import AutoModelForCausalLM as M; "
          "M.from_pretrained('" +
              dir + "').save_pretrained('" + dir + "', safe_serialization=True)\"");
    }
  }
  return SafetensorsError(dir, "",
                          std::string("no ") + kSingleWeightsFile + " or " + kWeightsIndexFile +
                              (error ? ": " + error.message() : std::string()));
}

Json read_json_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw SafetensorsError(path, "", "cannot be read");
  std::stringstream text;
  text << in.rdbuf();
  try {
    return Json::parse(text.str());
  } catch (const Json::exception& e) {
    throw SafetensorsError(path, "", std::string("not valid JSON: ") + e.what());
  }
}

// The index's weight_map as shard file name -> the tensors it maps there.
std::map<std::string, std::set<std::string>> shards_of_index(const Json& index,
                                                             const std::string& path) {
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
    throw SafetensorsError(path, "", "has no \"weight_map\" object of tensor name -> file");
  }
  std::map<std::string, std::set<std::string>> shards;
  for (const auto& [tensor, file] : index["weight_map"].items()) {
    if (!file.is_string()) {
      throw SafetensorsError(
          path, tensor,
          std::string("the weight_map value is a JSON ") + file.type_name() + ", not a file name");
    }
    const std::string name = file.get<std::string>();
    if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos) {
      throw SafetensorsError(path, tensor,
                             "its file '" + name +
                                 "' is not a file name in the "
                                 "model directory");
    }
    shards[name].insert(tensor);
  }
  return shards;
}

// Tensors grouped into shards: greedily, in order (safetensors_dir.h).
std::vector<std::vector<const TensorToWrite*>> plan_shards(const std::vector<TensorToWrite>& all,
                                                           uint64_t max_shard_bytes) {
  std::vector<std::vector<const TensorToWrite*>> shards;
  uint64_t filled = 0;
  for (const TensorToWrite& tensor : all) {
    if (shards.empty() || (!shards.back().empty() && filled + tensor.bytes > max_shard_bytes)) {
      shards.emplace_back();
      filled = 0;
    }
    shards.back().push_back(&tensor);
    filled += tensor.bytes;
  }
  return shards;
}

void write_shard(const std::string& path, const std::vector<const TensorToWrite*>& shard) {
  std::vector<TensorToWrite> tensors;
  for (const TensorToWrite* tensor : shard) tensors.push_back(*tensor);
  write_safetensors(path, tensors, {{"format", "pt"}});
}

void write_index(const std::string& path, const std::vector<TensorToWrite>& tensors,
                 const std::vector<std::string>& file_of_tensor) {
  uint64_t total = 0;
  Json weight_map = Json::object();
  for (size_t i = 0; i < tensors.size(); ++i) {
    total += tensors[i].bytes;
    weight_map[tensors[i].name] = file_of_tensor[i];
  }
  const Json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
  const std::string text = index.dump(2) + "\n";
  write_file_atomically(path, {{text.data(), text.size()}});
}

// Removes the weights files of a previous export that `kept` does not name.
void remove_stale_weights(const std::string& dir, const std::set<std::string>& kept) {
  static const std::regex kWeightsName(R"(model(-\d{5}-of-\d{5})?\.safetensors)");
  std::error_code error;
  std::vector<fs::path> stale;
  for (const auto& item : fs::directory_iterator(dir, error)) {
    const std::string name = item.path().filename().string();
    if (std::regex_match(name, kWeightsName) && kept.count(name) == 0) stale.push_back(item.path());
  }
  if (error) throw std::runtime_error(dir + ": cannot list: " + error.message());
  for (const fs::path& path : stale) {
    if (!fs::remove(path, error) && error) {
      throw std::runtime_error(path.string() + ": cannot remove: " + error.message());
    }
  }
}

}  // namespace

std::string shard_file_name(size_t index, size_t count) {
  char name[64];
  std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", index, count);
  return name;
}

// ---- reading ----

SafetensorsDir::SafetensorsDir(const std::string& dir) : dir_(dir) {
  const std::string single = join(dir, kSingleWeightsFile);
  const std::string index = join(dir, kWeightsIndexFile);
  if (is_file(single)) {
    add_file(single);
  } else if (is_file(index)) {
    read_index(index);
  } else {
    throw no_weights_error(dir);
  }
}

void SafetensorsDir::add_file(const std::string& path) {
  files_.push_back(std::make_unique<SafetensorsFile>(path));
  const SafetensorsFile& file = *files_.back();
  for (const TensorEntry& entry : file.header().tensors) {
    if (!tensors_.emplace(entry.name, Location{&file, &entry}).second) {
      throw SafetensorsError(path, entry.name, "also in " + tensors_.at(entry.name).file->path());
    }
  }
}

void SafetensorsDir::read_index(const std::string& index_path) {
  const std::string index_name = fs::path(index_path).filename().string();
  for (const auto& [shard, listed] : shards_of_index(read_json_file(index_path), index_path)) {
    const std::string path = join(dir_, shard);
    if (!is_file(path)) {
      throw SafetensorsError(index_path, *listed.begin(),
                             "its file " + shard + " does not exist in " + dir_);
    }
    add_file(path);
    const SafetensorsFile& file = *files_.back();
    for (const std::string& tensor : listed) {
      if (file.find(tensor) == nullptr) {
        throw SafetensorsError(path, tensor, index_name + " maps it to this file, which lacks it");
      }
    }
    for (const TensorEntry& entry : file.header().tensors) {
      if (listed.count(entry.name) == 0) {
        throw SafetensorsError(path, entry.name,
                               "in this file, but " + index_name + " does not map it here");
      }
    }
  }
}

std::vector<std::string> SafetensorsDir::names() const {
  std::vector<std::string> names;
  for (const auto& [name, location] : tensors_) names.push_back(name);
  return names;
}

const SafetensorsDir::Location& SafetensorsDir::locate(const std::string& name) const {
  const auto found = tensors_.find(name);
  if (found == tensors_.end()) throw SafetensorsError(dir_, name, "no such tensor");
  return found->second;
}

const TensorEntry& SafetensorsDir::entry(const std::string& name) const {
  return *locate(name).entry;
}

const uint8_t* SafetensorsDir::data(const std::string& name) const {
  const Location& location = locate(name);
  return location.file->data(*location.entry);
}

void SafetensorsDir::release(const std::string& name) const {
  const Location& location = locate(name);
  location.file->release(*location.entry);
}

const std::string& SafetensorsDir::file_of(const std::string& name) const {
  return locate(name).file->path();
}

// ---- writing ----

void write_safetensors_dir(const std::string& dir, const std::vector<TensorToWrite>& tensors,
                           uint64_t max_shard_bytes) {
  safetensors_header(tensors, {}, dir);  // refuses bad tensors before DIR changes
  std::error_code error;
  fs::create_directories(dir, error);
  if (error) throw std::runtime_error(dir + ": cannot create: " + error.message());
  const std::string index_path = join(dir, kWeightsIndexFile);
  if (!fs::remove(index_path, error) && error) {
    throw std::runtime_error(index_path + ": cannot remove: " + error.message());
  }

  const auto shards = plan_shards(tensors, max_shard_bytes);
  std::set<std::string> written;
  if (shards.size() <= 1) {  // one file, as transformers writes a model that fits one shard
    write_safetensors(join(dir, kSingleWeightsFile), tensors, {{"format", "pt"}});
    written.insert(kSingleWeightsFile);
  } else {
    std::vector<std::string> file_of_tensor;
    for (size_t i = 0; i < shards.size(); ++i) {
      const std::string name = shard_file_name(i + 1, shards.size());
      write_shard(join(dir, name), shards[i]);
      written.insert(name);
      file_of_tensor.insert(file_of_tensor.end(), shards[i].size(), name);
    }
    write_index(index_path, tensors, file_of_tensor);
  }
  remove_stale_weights(dir, written);
}

}  // namespace ddpd::hf
