#include "train/checkpoint.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "ddpd/common/remove_tree.h"

namespace ddpd::detail {
namespace fs = std::filesystem;
namespace {

// Beside metadata.json: the FNV-1a of its bytes, in hex.
constexpr const char* kMetadataChecksumFile = "metadata.json.fnv1a64";

// FNV-1a, 64 bit: a checksum that catches flipped and truncated bytes (not an adversary).
struct Fnv1a {
  uint64_t hash = 1469598103934665603ull;
  void add(const char* data, size_t n) {
    for (size_t i = 0; i < n; ++i) {
      hash ^= static_cast<unsigned char>(data[i]);
      hash *= 1099511628211ull;
    }
  }
  std::string hex() const {
    char buf[17];
    std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(hash));
    return buf;
  }
};

[[noreturn]] void io_error(const std::string& what, const std::string& path, int error) {
  throw std::runtime_error("checkpoint: " + what + " '" + path + "': " + std::strerror(error));
}

std::unique_ptr<WritableFile> create_file(FileEnv& env, const std::string& path) {
  std::unique_ptr<WritableFile> file;
  if (const int error = env.create(path, file)) io_error("cannot create", path, error);
  return file;
}

void sync_file(WritableFile& file, const std::string& path) {
  if (const int error = file.sync()) io_error("fsync failed for", path, error);
}

void fsync_path(FileEnv& env, const std::string& path, bool directory) {
  if (const int error = env.sync_path(path, directory)) io_error("fsync failed for", path, error);
}

// Writes all `n` bytes, whatever short writes the file makes on the way.
void write_all(WritableFile& file, const char* data, size_t n, const std::string& path) {
  while (n > 0) {
    size_t written = 0;
    if (const int error = file.write(data, n, written)) io_error("cannot write", path, error);
    data += written;
    n -= written;
  }
}

// Writes `text` to `path` and fsyncs it.
void write_text_durably(FileEnv& env, const std::string& path, const std::string& text) {
  const auto file = create_file(env, path);
  write_all(*file, text.data(), text.size(), path);
  sync_file(*file, path);
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("checkpoint: missing file '" + path + "'");
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// metadata.json, parsed once its bytes match the checksum written beside it.
nlohmann::json read_checked_metadata(const std::string& dir) {
  const std::string path = dir + "/metadata.json";
  const std::string text = read_text(path);
  std::string expected = read_text(dir + "/" + kMetadataChecksumFile);
  while (!expected.empty() && std::isspace(static_cast<unsigned char>(expected.back()))) {
    expected.pop_back();
  }
  Fnv1a checksum;
  checksum.add(text.data(), text.size());
  if (checksum.hex() != expected) {
    throw std::runtime_error("checkpoint: corrupted file '" + path + "': checksum " +
                             checksum.hex() + ", " + kMetadataChecksumFile + " says " + expected);
  }
  try {
    return nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    throw std::runtime_error("checkpoint: corrupted file '" + path + "': " + e.what());
  }
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("checkpoint: missing file '" + path + "'");
  try {
    return nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    throw std::runtime_error("checkpoint: corrupted file '" + path + "': " + e.what());
  }
}

}  // namespace

std::string checkpoint_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "step-%06lld", static_cast<long long>(step));
  return buf;
}

CheckpointShardWriter::CheckpointShardWriter(const std::string& dir, int rank, FileEnv& env)
    : env_(env), dir_(dir), file_("rank-" + std::to_string(rank) + ".bin") {
  index_["tensors"] = nlohmann::json::object();
}

void CheckpointShardWriter::add(const std::string& name, const std::vector<int64_t>& shape,
                                const torch::Tensor& values, int64_t element_offset,
                                int64_t adam_step) {
  // float32 on disk, or float64 for a float64 model (the equivalence tests' verification runs):
  // a resume then continues at the precision it left off with.
  const auto dtype = values.scalar_type() == torch::kDouble ? torch::kDouble : torch::kFloat32;
  torch::Tensor flat = values.detach().to(torch::kCPU, dtype).contiguous().reshape(-1);
  auto& entry = index_["tensors"][name];
  entry["shape"] = shape;
  entry["dtype"] = dtype == torch::kDouble ? "float64" : "float32";
  if (adam_step >= 0) entry["adam_step"] = adam_step;
  entry["chunks"].push_back({{"file", file_},
                             {"byte_offset", bytes_},
                             {"element_offset", element_offset},
                             {"numel", flat.numel()}});
  bytes_ += static_cast<int64_t>(flat.nbytes());
  pending_.push_back(std::move(flat));
}

void CheckpointShardWriter::finish(int64_t crash_after_bytes) {
  const std::string path = dir_ + "/" + file_;
  const auto file = create_file(env_, path);
  Fnv1a checksum;
  int64_t written = 0;
  for (const auto& t : pending_) {
    const char* data = static_cast<const char*>(t.data_ptr());
    const size_t n = t.nbytes();
    if (crash_after_bytes > 0 && written + static_cast<int64_t>(n) >= crash_after_bytes) {
      write_all(*file, data, static_cast<size_t>(crash_after_bytes - written), path);
      std::fprintf(stderr, "ddpd: inject crash-during-checkpoint: exiting after %lld bytes of %s\n",
                   static_cast<long long>(crash_after_bytes), path.c_str());
      std::fflush(stderr);
      std::_Exit(3);
    }
    write_all(*file, data, n, path);
    checksum.add(data, n);
    written += static_cast<int64_t>(n);
  }
  sync_file(*file, path);
  index_["file"] = {{"name", file_}, {"bytes", bytes_}, {"fnv1a64", checksum.hex()}};
  write_text_durably(env_, dir_ + "/" + fs::path(file_).stem().string() + ".index.json",
                     index_.dump());
  pending_.clear();
}

void commit_checkpoint(const std::string& tmp_dir, const std::string& final_dir,
                       nlohmann::json header, int world_size, int keep, FileEnv& env) {
  // Protocol: every rank has fsynced its file and index into tmp_dir (a barrier ensured it).
  // metadata.json goes in last, then the directory is renamed into place, then `latest` moves.
  // A crash before the rename leaves only a .tmp directory; one between the rename and the
  // pointer leaves `latest` at the previous checkpoint, which is still whole.
  nlohmann::json& tensors = header["tensors"] = nlohmann::json::object();
  nlohmann::json& files = header["files"] = nlohmann::json::object();
  for (int r = 0; r < world_size; ++r) {
    const std::string index_path = tmp_dir + "/rank-" + std::to_string(r) + ".index.json";
    const nlohmann::json index = read_json(index_path);
    files[index["file"]["name"].get<std::string>()] = {{"bytes", index["file"]["bytes"]},
                                                       {"fnv1a64", index["file"]["fnv1a64"]}};
    for (const auto& [name, part] : index["tensors"].items()) {
      auto& merged = tensors[name];
      merged["shape"] = part["shape"];
      merged["dtype"] = part["dtype"];
      if (part.contains("adam_step")) merged["adam_step"] = part["adam_step"];
      for (const auto& c : part["chunks"]) merged["chunks"].push_back(c);
    }
    fs::remove(index_path);
  }
  // The checksum covers metadata.json byte for byte: a shifted byte_offset or an edited
  // adam_step used to resume with wrong state, since nothing else checks the metadata.
  const std::string metadata = header.dump(1);
  Fnv1a checksum;
  checksum.add(metadata.data(), metadata.size());
  write_text_durably(env, tmp_dir + "/metadata.json", metadata);
  write_text_durably(env, tmp_dir + "/" + kMetadataChecksumFile, checksum.hex() + "\n");
  fsync_path(env, tmp_dir, true);
  const fs::path parent = fs::path(final_dir).parent_path();
  remove_tree(final_dir);  // a re-run of the same step
  fs::rename(tmp_dir, final_dir);
  fsync_path(env, parent.string(), true);
  const std::string pointer = (parent / "latest").string();
  write_text_durably(env, pointer + ".tmp", fs::path(final_dir).filename().string() + "\n");
  fs::rename(pointer + ".tmp", pointer);
  fsync_path(env, parent.string(), true);
  if (keep > 0) {
    std::vector<std::string> steps;
    for (const auto& e : fs::directory_iterator(parent)) {
      const std::string name = e.path().filename().string();
      if (e.is_directory() && name.rfind("step-", 0) == 0) steps.push_back(name);
    }
    std::sort(steps.begin(), steps.end());
    for (size_t i = 0; i + keep < steps.size(); ++i) remove_tree((parent / steps[i]).string());
  }
}

std::string resolve_resume(const std::string& resume, const std::string& checkpoint_dir) {
  if (resume == "auto") {
    if (!fs::exists(fs::path(checkpoint_dir) / "latest")) return "";
    return resolve_resume(checkpoint_dir, checkpoint_dir);
  }
  fs::path dir = resume == "latest" ? fs::path(checkpoint_dir) : fs::path(resume);
  if (resume == "latest" && checkpoint_dir.empty()) {
    throw std::runtime_error("--resume latest needs --checkpoint-dir");
  }
  if (fs::exists(dir / "metadata.json")) return dir.string();
  const fs::path pointer = dir / "latest";
  std::ifstream in(pointer);
  if (!in) {
    throw std::runtime_error("--resume: '" + dir.string() +
                             "' holds neither metadata.json nor a latest pointer");
  }
  std::string name;
  std::getline(in, name);
  const fs::path target = dir / name;
  if (!fs::exists(target / "metadata.json")) {
    throw std::runtime_error("--resume: '" + pointer.string() + "' points at '" + target.string() +
                             "', which holds no metadata.json");
  }
  return target.string();
}

CheckpointReader::CheckpointReader(const std::string& dir) : dir_(dir) {
  metadata_ = read_checked_metadata(dir);
  if (metadata_.value("format_version", 0) != kCheckpointFormatVersion) {
    throw std::runtime_error("checkpoint: '" + dir + "/metadata.json' has format version " +
                             std::to_string(metadata_.value("format_version", 0)) +
                             ", this build reads " + std::to_string(kCheckpointFormatVersion));
  }
  for (const auto& [file, info] : metadata_.at("files").items()) {
    const std::string path = dir + "/" + file;
    std::error_code ec;
    const auto size = fs::file_size(path, ec);
    if (ec) throw std::runtime_error("checkpoint: missing file '" + path + "'");
    if (static_cast<int64_t>(size) != info.at("bytes").get<int64_t>()) {
      throw std::runtime_error("checkpoint: truncated file '" + path +
                               "': " + std::to_string(size) + " bytes, metadata says " +
                               std::to_string(info.at("bytes").get<int64_t>()));
    }
  }
}

bool CheckpointReader::has(const std::string& name) const {
  return metadata_.at("tensors").contains(name);
}

std::vector<int64_t> CheckpointReader::shape(const std::string& name) const {
  return metadata_.at("tensors").at(name).at("shape").get<std::vector<int64_t>>();
}

int64_t CheckpointReader::adam_step(const std::string& name) const {
  return metadata_.at("tensors").at(name).value("adam_step", int64_t{0});
}

void CheckpointReader::verify(const std::string& file) {
  if (verified_[file]) return;
  const std::string path = dir_ + "/" + file;
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("checkpoint: missing file '" + path + "'");
  Fnv1a checksum;
  std::vector<char> buf(1 << 20);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    checksum.add(buf.data(), static_cast<size_t>(in.gcount()));
  }
  const std::string expected = metadata_.at("files").at(file).at("fnv1a64");
  if (checksum.hex() != expected) {
    throw std::runtime_error("checkpoint: corrupted file '" + path + "': checksum " +
                             checksum.hex() + ", metadata says " + expected);
  }
  verified_[file] = true;
}

torch::ScalarType CheckpointReader::dtype(const std::string& name) const {
  if (!has(name)) {
    throw std::runtime_error("checkpoint: '" + dir_ + "/metadata.json' has no tensor '" + name +
                             "'");
  }
  const std::string dtype = metadata_["tensors"][name].value("dtype", "float32");
  if (dtype != "float32" && dtype != "float64") {
    throw std::runtime_error("checkpoint: tensor '" + name + "' has dtype '" + dtype + "' (" +
                             dir_ + "/metadata.json; expected float32 or float64)");
  }
  return dtype == "float64" ? torch::kDouble : torch::kFloat32;
}

torch::Tensor CheckpointReader::read(const std::string& name, int64_t begin, int64_t end) {
  torch::Tensor out = torch::zeros({std::max<int64_t>(end - begin, 0)}, dtype(name));
  read_into(name, begin, out);
  return out;
}

void CheckpointReader::read_into(const std::string& name, int64_t begin, const torch::Tensor& out) {
  TORCH_CHECK(out.device().is_cpu() && out.is_contiguous() && out.scalar_type() == dtype(name),
              "checkpoint: read_into needs a contiguous CPU tensor of the stored dtype");
  const int64_t end = begin + out.numel();
  const int64_t element = static_cast<int64_t>(out.element_size());
  char* data = static_cast<char*>(out.data_ptr());
  int64_t covered = 0;
  for (const auto& c : metadata_["tensors"][name]["chunks"]) {
    const int64_t c_begin = c.at("element_offset"), c_end = c_begin + c.at("numel").get<int64_t>();
    const int64_t lo = std::max(begin, c_begin), hi = std::min(end, c_end);
    if (lo >= hi) continue;
    const std::string file = c.at("file");
    verify(file);
    const std::string path = dir_ + "/" + file;
    std::ifstream in(path, std::ios::binary);
    in.seekg(c.at("byte_offset").get<int64_t>() + (lo - c_begin) * element);
    in.read(data + (lo - begin) * element, (hi - lo) * element);
    if (!in) throw std::runtime_error("checkpoint: truncated file '" + path + "'");
    covered += hi - lo;
  }
  if (covered != end - begin) {
    throw std::runtime_error("checkpoint: tensor '" + name + "' elements [" +
                             std::to_string(begin) + ", " + std::to_string(end) +
                             ") are not all in its chunks (" + dir_ + "/metadata.json)");
  }
}

}  // namespace ddpd::detail
