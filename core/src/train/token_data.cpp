#include "train/token_data.h"

#include <ATen/CPUGeneratorImpl.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include <nlohmann/json.hpp>

#include "ddpd/common/unreadable_path.h"

namespace ddpd::detail {
namespace {

uint64_t mix(uint64_t x) {  // splitmix64's finaliser
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// A bijection of [0, n) chosen by `key`: a 4-round Feistel network over the smallest even number
// of bits covering n, cycle-walked back into range (fewer than 4 rounds of walking on average).
int64_t permute(int64_t x, int64_t n, uint64_t key) {
  int bits = 2;
  while ((int64_t{1} << bits) < n) bits += 2;
  const int half = bits / 2;
  const uint64_t mask = (uint64_t{1} << half) - 1;
  uint64_t v = static_cast<uint64_t>(x);
  do {
    uint64_t left = v >> half, right = v & mask;
    for (uint64_t round = 0; round < 4; ++round) {
      const uint64_t next = left ^ (mix(key ^ mix(round * 0x100000001B3ull + right)) & mask);
      left = right;
      right = next;
    }
    v = (left << half) | right;
  } while (v >= static_cast<uint64_t>(n));
  return static_cast<int64_t>(v);
}

// Bytes per token.
int64_t width_of(const SampleSource& source) {
  if (source.text) return 1;
  return source.dtype == TokenDtype::kUint16 ? 2 : 4;
}

// A token file's sidecar, PATH.json (scripts/tokenize_text.py writes it: dtype, vocab_size,
// tokenizer), checked against the job's flags; a file without one is read as the flags say.
void check_sidecar(const SampleSource& source, int64_t vocab_size) {
  const std::string sidecar = source.path + ".json";
  std::ifstream in(sidecar);
  if (!in) return;
  nlohmann::json meta;
  try {
    meta = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw OptionError(source.flag, sidecar + ": not JSON (" + e.what() + "); it describes '" +
                                       source.path + "': fix or remove it");
  }
  const std::string dtype = meta.value("dtype", std::string());
  if (!dtype.empty() && dtype != enum_name(source.dtype)) {
    throw OptionError("--data-dtype", "'" + source.path + "' holds " + dtype + " tokens (" +
                                          sidecar + "), not " + enum_name(source.dtype) +
                                          ": pass --data-dtype " + dtype);
  }
  const int64_t file_vocab = meta.value("vocab_size", int64_t{0});
  if (file_vocab > vocab_size) {
    throw OptionError("--vocab", "'" + source.path + "' was tokenized with a vocabulary of " +
                                     std::to_string(file_vocab) + " (" + sidecar +
                                     "), larger than the model's " + std::to_string(vocab_size) +
                                     ": pass --vocab " + std::to_string(file_vocab) +
                                     " or --init-from the tokenizer's model");
  }
}

}  // namespace

struct TokenSamples::MappedFile {
  const unsigned char* data = nullptr;
  size_t bytes = 0;
  ~MappedFile() {
    if (data) munmap(const_cast<unsigned char*>(data), bytes);
  }
};

TokenSamples::TokenSamples(const SampleSource& source, int64_t context, int64_t vocab_size,
                           uint64_t seed)
    : source_(source), context_(context), vocab_size_(vocab_size), seed_(seed) {
  if (source.path.empty()) return;
  const int fd = open(source.path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    throw UnreadablePath(source.flag, source.path,
                         "cannot open '" + source.path + "': " + std::strerror(errno));
  }
  if (!source.text) {
    try {
      check_sidecar(source, vocab_size);
    } catch (...) {
      close(fd);
      throw;
    }
  }
  struct stat info {};
  fstat(fd, &info);
  const int64_t bytes = info.st_size;
  const int64_t width = width_of(source);
  if (bytes % width != 0) {
    close(fd);
    throw OptionError(source.flag, "size of '" + source.path + "' (" + std::to_string(bytes) +
                                       " bytes) is not a multiple of " + std::to_string(width) +
                                       " (--data-dtype " + enum_name(source.dtype) + ")");
  }
  const int64_t tokens = bytes / width;
  if (tokens < context + 1) {
    close(fd);
    throw OptionError(source.flag, "'" + source.path + "' holds " + std::to_string(tokens) +
                                       " tokens, fewer than --context + 1 (" +
                                       std::to_string(context + 1) + ")");
  }
  void* mapped = mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);  // the mapping keeps the file
  if (mapped == MAP_FAILED) {
    throw OptionError(source.flag,
                      "cannot map '" + source.path + "': " + std::string(std::strerror(errno)));
  }
  madvise(mapped, bytes, MADV_RANDOM);  // windows are read in a shuffled order
  file_ = std::make_unique<MappedFile>();
  file_->data = static_cast<const unsigned char*>(mapped);
  file_->bytes = bytes;
  stride_ = source.file_order ? context + 1 : context;
  windows_ = source.file_order ? tokens / stride_ : (tokens - 1) / context;
}

TokenSamples::~TokenSamples() = default;

int64_t TokenSamples::window_of_sample(int64_t g) const {
  if (source_.file_order) {
    if (g >= windows_) {
      throw OptionError(source_.flag, "'" + source_.path + "' holds " + std::to_string(windows_) +
                                          " windows of --context + 1 tokens, and window " +
                                          std::to_string(g) +
                                          " was asked for (--eval-batches × --batch windows)");
    }
    return g;
  }
  const int64_t epoch = g / windows_;
  return permute(g % windows_, windows_, mix(seed_ ^ mix(static_cast<uint64_t>(epoch) + 1)));
}

torch::Tensor TokenSamples::window(int64_t index) const {
  const int64_t width = width_of(source_);
  const unsigned char* begin = file_->data + index * stride_ * width;
  torch::Tensor out = torch::empty({context_ + 1}, torch::kInt64);
  int64_t* tokens = out.data_ptr<int64_t>();
  for (int64_t i = 0; i <= context_; ++i) {
    int64_t token;
    if (width == 1) {
      token = begin[i];
    } else if (width == 2) {
      uint16_t v;
      std::memcpy(&v, begin + 2 * i, 2);
      token = v;
    } else {
      int32_t v;
      std::memcpy(&v, begin + 4 * i, 4);
      token = v;
    }
    if (token < 0 || token >= vocab_size_) {
      throw OptionError(source_.flag, "token " + std::to_string(token) + " at index " +
                                          std::to_string(index * stride_ + i) + " of '" +
                                          source_.path + "' is outside the vocabulary of " +
                                          std::to_string(vocab_size_));
    }
    tokens[i] = token;
  }
  return out;
}

torch::Tensor TokenSamples::samples(int64_t first, int64_t count) const {
  torch::Tensor out = torch::empty({count, context_ + 1}, torch::kInt64);
  for (int64_t i = 0; i < count; ++i) {
    const int64_t g = first + i;
    if (file_) {
      out[i].copy_(window(window_of_sample(g)));
    } else {
      auto generator = at::make_generator<at::CPUGeneratorImpl>(mix(seed_ ^ mix(g)));
      out[i].copy_(torch::randint(0, vocab_size_, {context_ + 1}, generator, torch::kInt64));
    }
  }
  return out;
}

SampleSource training_source(const DdpJobOptions& o) {
  if (!o.data_text.empty()) return {o.data_text, true, o.data_dtype, "--data-text"};
  return {o.data_path, false, o.data_dtype, "--data"};
}

SampleSource eval_source(const DdpJobOptions& o) {
  return {o.eval_data, !o.data_text.empty(), o.data_dtype, "--eval-data",
          o.eval_order == EvalOrder::kFile};
}

}  // namespace ddpd::detail
