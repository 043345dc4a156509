// ddpd-safetensors-fuzz: parse_header() (core/src/hf/safetensors.h) under mutated files for a
// bounded time, deterministic for a seed. Inputs come from valid files serialised in memory
// (serialize_safetensors, the writer's own layout) and from generated headers whose entries draw
// dimensions, dtypes and offsets from edge values, then 1 to 4 mutations each: bit flips,
// truncation, byte insertion and deletion, header-length rewrites, JSON token splices (huge,
// negative and fractional numbers, wrong types, brackets, bad UTF-8) and header slices copied
// elsewhere (repeated keys).
//
// Every input is parsed from an exact-size heap buffer. parse_header must either refuse it with a
// SafetensorsError naming the file, or accept a header whose every span lies inside the buffer,
// matches its shape and overlaps no other: this program then reads every byte of every span (a
// sanitizer build sees any read out of bounds). Anything else prints the input in hex and exits 1.
//
//   ddpd-safetensors-fuzz [--seconds S] [--seed N] [--iterations K]
// --iterations stops after K inputs instead (to replay a failure: same seed, its iteration + 1).
#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "hf/safetensors.h"

namespace {

using ddpd::hf::Header;
using ddpd::hf::SafetensorsError;
using ddpd::hf::StDtype;
using ddpd::hf::TensorEntry;
using ddpd::hf::TensorToWrite;
using Random = std::mt19937_64;

constexpr const char* kFileName = "fuzz.safetensors";

struct Options {
  double seconds = 10;
  uint64_t seed = 1;
  uint64_t iterations = 0;  // 0: until the time is up
};

[[noreturn]] void usage(const char* problem) {
  std::fprintf(stderr,
               "ddpd-safetensors-fuzz: %s\nusage: ddpd-safetensors-fuzz [--seconds S] "
               "[--seed N] [--iterations K]\n",
               problem);
  std::exit(2);
}

Options parse_options(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") usage("fuzzes the safetensors header parser");
    if (i + 1 >= argc) usage(("missing the value of " + flag).c_str());
    char* end = nullptr;
    const char* value = argv[++i];
    if (flag == "--seconds") {
      options.seconds = std::strtod(value, &end);
    } else if (flag == "--seed") {
      options.seed = std::strtoull(value, &end, 10);
    } else if (flag == "--iterations") {
      options.iterations = std::strtoull(value, &end, 10);
    } else {
      usage(("unknown flag " + flag).c_str());
    }
    if (end == value || *end != '\0') usage((flag + " needs a number").c_str());
  }
  return options;
}

size_t below(Random& random, size_t bound) { return bound == 0 ? 0 : random() % bound; }

template <typename T>
const T& pick(Random& random, const std::vector<T>& choices) {
  return choices[below(random, choices.size())];
}

// ---- valid starting points ----

std::vector<std::string> seed_files() {
  static const std::vector<uint8_t> bytes = [] {
    std::vector<uint8_t> data(4096);
    for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 37 + 11);
    return data;
  }();
  const void* p = bytes.data();
  std::vector<std::string> files;
  files.push_back(ddpd::hf::serialize_safetensors(
      {{"model.embed_tokens.weight", StDtype::kBF16, {4, 8}, p, 64},
       {"model.layers.0.mlp.up_proj.weight", StDtype::kF32, {2, 3}, p, 24},
       {"lm_head.bias", StDtype::kF16, {5}, p, 10},
       {"step", StDtype::kI64, {}, p, 8},
       {"mask", StDtype::kBool, {3}, p, 3},
       {"empty", StDtype::kF64, {0, 7}, p, 0}},
      {{"format", "pt"}}));
  files.push_back(ddpd::hf::serialize_safetensors({{"x", StDtype::kU8, {1}, p, 1}}, {}));
  files.push_back(ddpd::hf::serialize_safetensors({}, {{"format", "pt"}, {"k", "v"}}));
  std::vector<TensorToWrite> many;
  const StDtype dtypes[] = {StDtype::kF64, StDtype::kF32, StDtype::kF16, StDtype::kBF16,
                            StDtype::kI64, StDtype::kI32, StDtype::kI16, StDtype::kI8,
                            StDtype::kU8,  StDtype::kBool};
  for (int i = 0; i < 20; ++i) {
    const StDtype dtype = dtypes[i % 10];
    const int64_t rows = i % 4, cols = 1 + i % 3;
    many.push_back({"t" + std::to_string(i),
                    dtype,
                    {rows, cols},
                    p,
                    static_cast<size_t>(rows * cols) * ddpd::hf::element_size(dtype)});
  }
  files.push_back(ddpd::hf::serialize_safetensors(many, {{"format", "pt"}}));
  return files;
}

void put_u64_le(std::string& file, uint64_t value) {
  if (file.size() < 8) file.resize(8, '\0');
  for (int i = 0; i < 8; ++i) file[i] = static_cast<char>((value >> (8 * i)) & 0xff);
}

uint64_t get_u64_le(const std::string& file) {
  uint64_t value = 0;
  for (int i = 7; i >= 0 && file.size() >= 8; --i) {
    value = (value << 8) | static_cast<uint8_t>(file[i]);
  }
  return value;
}

// The element size of a dtype name; 1 for the names the parser does not know.
uint64_t element_size_of(const std::string& dtype) {
  if (dtype == "F64" || dtype == "I64") return 8;
  if (dtype == "F32" || dtype == "I32" || dtype == "U32") return 4;
  if (dtype == "F16" || dtype == "BF16" || dtype == "I16") return 2;
  return 1;
}

// A header of random entries: mostly consistent, with edge values mixed in.
std::string generated_file(Random& random) {
  static const std::vector<std::string> names = {
      "w", "b", "w", "__metadata__", "", "layers.0.q.weight", "\\u00e9"};
  static const std::vector<std::string> dtypes = {"F64", "F32", "F16", "BF16", "I64",     "I32",
                                                  "I16", "I8",  "U8",  "BOOL", "F8_E4M3", "U32"};
  static const std::vector<std::string> odd_dims = {
      "-1", "4294967296", "9223372036854775807", "18446744073709551615", "1.5", "\"2\""};
  std::string header = "{";
  if (random() % 4 == 0) header += R"("__metadata__": {"format": "pt"},)";
  uint64_t offset = 0;
  const size_t count = below(random, 6);
  for (size_t i = 0; i < count; ++i) {
    const std::string dtype = pick(random, dtypes);
    uint64_t bytes = element_size_of(dtype);
    std::string shape = "[";
    const size_t rank = below(random, 4);
    for (size_t d = 0; d < rank; ++d) {
      const uint64_t dim = below(random, 4);
      const bool odd = random() % 16 == 0;
      shape += (d ? "," : "") + (odd ? pick(random, odd_dims) : std::to_string(dim));
      bytes *= dim;
    }
    shape += "]";
    const uint64_t begin = random() % 8 == 0 ? offset - below(random, 4) : offset;
    const uint64_t end = begin + bytes + (random() % 8 == 0 ? below(random, 3) : 0);
    header += std::string(i ? "," : "") + "\"" + pick(random, names) + std::to_string(i % 2) +
              "\": {\"dtype\": \"" + dtype + "\", \"shape\": " + shape + ", \"data_offsets\": [" +
              std::to_string(begin) + ", " + std::to_string(end) + "]}";
    offset = end;
  }
  header += "}";
  if (random() % 2) header.append((8 - header.size() % 8) % 8, ' ');
  std::string file(8, '\0');
  put_u64_le(file, header.size());
  const uint64_t data = offset + below(random, 4) - (random() % 4 == 0 ? 1 : 0);
  return file + header + std::string(std::min<uint64_t>(data, 1 << 16), '\x33');
}

// ---- mutations ----

void flip_bits(std::string& file, Random& random) {
  if (file.empty()) return;
  for (size_t n = 1 + below(random, 8); n > 0; --n) {
    file[below(random, file.size())] ^= static_cast<char>(1u << below(random, 8));
  }
}

void truncate(std::string& file, Random& random) { file.resize(below(random, file.size() + 1)); }

void insert_bytes(std::string& file, Random& random) {
  static const char kInteresting[] = "{}[],:\"-0123456789.eE \\\xff";  // and the NUL
  static const std::string interesting(kInteresting, sizeof kInteresting);
  std::string bytes;
  for (size_t n = 1 + below(random, 8); n > 0; --n) {
    bytes +=
        random() % 2 ? static_cast<char>(random()) : interesting[below(random, interesting.size())];
  }
  file.insert(below(random, file.size() + 1), bytes);
}

void delete_bytes(std::string& file, Random& random) {
  if (file.empty()) return;
  const size_t at = below(random, file.size());
  file.erase(at, 1 + below(random, std::min<size_t>(16, file.size() - at)));
}

void rewrite_header_length(std::string& file, Random& random) {
  const uint64_t now = get_u64_le(file), size = file.size(), limit = 100ull << 20;
  const std::vector<uint64_t> near = {now + 1, now - 1, size, size - 8, size - 7};
  const std::vector<uint64_t> far = {0, 1, limit, limit + 1, 1ull << 63, ~0ull, random()};
  put_u64_le(file, random() % 2 ? pick(random, near) : pick(random, far));
}

// The [begin, end) of the JSON token at or after `at` in the header.
std::pair<size_t, size_t> token_at(const std::string& file, size_t at, size_t header_end) {
  size_t end = at + 1;
  if (file[at] == '"') {
    while (end < header_end && file[end] != '"') ++end;
    return {at, std::min(end + 1, header_end)};
  }
  auto in_word = [&](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || std::strchr("+-.", c);
  };
  if (in_word(file[at])) {
    while (end < header_end && in_word(file[end])) ++end;
  }
  return {at, end};
}

void splice_json_token(std::string& file, Random& random) {
  static const std::vector<std::string> tokens = {"18446744073709551615",
                                                  "18446744073709551616",
                                                  "9223372036854775808",
                                                  "-1",
                                                  "-9223372036854775808",
                                                  "0",
                                                  "-0",
                                                  "1e400",
                                                  "1e3",
                                                  "0.5",
                                                  "\"F32\"",
                                                  "\"BOOL\"",
                                                  "\"F8_E4M3\"",
                                                  "\"\"",
                                                  "null",
                                                  "true",
                                                  "[]",
                                                  "{}",
                                                  "[0,0]",
                                                  "[1,2,3]",
                                                  "[4294967296,4294967296]",
                                                  "\"__metadata__\"",
                                                  "{\"a\":1}",
                                                  "\"\\u0000\"",
                                                  "\"\\ud800\"",
                                                  "[[[[[[[[[[[[",
                                                  "]",
                                                  "}",
                                                  ",",
                                                  ":",
                                                  "\"\xff\"",
                                                  "\"dtype\"",
                                                  "\"shape\"",
                                                  "\"data_offsets\""};
  const uint64_t length = get_u64_le(file);
  if (file.size() <= 8) return;
  const size_t header_end = 8 + std::min<uint64_t>(length, file.size() - 8);
  if (header_end <= 8) return;
  const auto [begin, end] = token_at(file, 8 + below(random, header_end - 8), header_end);
  const std::string& token = pick(random, tokens);
  file.replace(begin, end - begin, token);
  if (random() % 5 != 0) put_u64_le(file, length + token.size() - (end - begin));
}

void copy_header_slice(std::string& file, Random& random) {
  const uint64_t length = get_u64_le(file);
  if (file.size() <= 8 || length == 0 || length > file.size() - 8) return;
  const size_t from = 8 + below(random, length), to = 8 + below(random, length);
  const std::string slice =
      file.substr(from, 1 + below(random, std::min<uint64_t>(64, 8 + length - from)));
  file.insert(to, slice);
  put_u64_le(file, length + slice.size());
}

void mutate(std::string& file, Random& random) {
  using Mutation = void (*)(std::string&, Random&);
  static const Mutation mutations[] = {
      flip_bits,         truncate,          insert_bytes,     delete_bytes, rewrite_header_length,
      splice_json_token, splice_json_token, copy_header_slice};
  for (size_t n = 1 + below(random, 4); n > 0; --n) {
    mutations[below(random, std::size(mutations))](file, random);
  }
}

// ---- checking ----

struct Stats {
  uint64_t iterations = 0, accepted = 0, refused = 0, tensors = 0, checksum = 0;
  std::set<std::string> refusal_kinds;  // messages without file, tensor and numbers
};

[[noreturn]] void fail(const std::string& problem, const std::string& input, uint64_t iteration,
                       const Options& options) {
  std::fprintf(stderr, "ddpd-safetensors-fuzz: FAILED at iteration %llu (--seed %llu): %s\n",
               static_cast<unsigned long long>(iteration),
               static_cast<unsigned long long>(options.seed), problem.c_str());
  std::fprintf(stderr, "input (%zu bytes, hex):\n", input.size());
  for (size_t i = 0; i < input.size(); ++i) {
    std::fprintf(stderr, "%02x%s", static_cast<uint8_t>(input[i]), i % 32 == 31 ? "\n" : "");
  }
  std::fprintf(stderr, "\n");
  std::exit(1);
}

// An accepted header's promises, checked independently of the parser; returns the first broken
// one, or "" when all hold. Reads every byte of every span into `checksum`.
std::string broken_promise(const Header& header, const uint8_t* bytes, size_t size,
                           uint64_t& checksum) {
  if (header.data_start != 8 + get_u64_le(std::string(reinterpret_cast<const char*>(bytes), 8)) ||
      header.data_start > size) {
    return "data_start disagrees with the header length";
  }
  const uint64_t data_bytes = size - header.data_start;
  uint64_t last_end = 0, last_begin = 0;
  for (const TensorEntry& entry : header.tensors) {
    if (entry.begin > entry.end || entry.end > data_bytes) return "span outside the data area";
    if (entry.begin < last_begin) return "tensors not sorted by begin";
    last_begin = entry.begin;
    unsigned __int128 expected = ddpd::hf::element_size(entry.dtype);
    for (int64_t dim : entry.shape) {
      if (dim < 0) return "negative dimension accepted";
      expected = std::min<unsigned __int128>(expected * static_cast<uint64_t>(dim), ~0ull);
    }
    if (expected != entry.end - entry.begin) return "span size differs from shape";
    if (entry.begin == entry.end) continue;
    if (entry.begin < last_end) return "overlapping spans accepted";
    last_end = entry.end;
    const uint8_t* span = bytes + header.data_start + entry.begin;
    for (uint64_t i = 0; i < entry.end - entry.begin; ++i) checksum += span[i];
  }
  return "";
}

// The message's shape: what follows the tensor name, digits dropped.
std::string refusal_kind(const std::string& what) {
  std::string kind = what.substr(std::strlen(kFileName) + 2);
  const size_t tensor_end = kind.rfind("': ");
  if (kind.rfind("tensor '", 0) == 0 && tensor_end != std::string::npos)
    kind.erase(0, tensor_end + 3);
  std::string shape;
  for (char c : kind.substr(0, 40)) {
    if (c == '\'' || c == '"' || c == '[' || c == '(') break;  // quoted values vary
    if (!std::isdigit(static_cast<unsigned char>(c))) shape += c;
  }
  return shape;
}

void check(const std::string& input, Stats& stats, const Options& options) {
  std::unique_ptr<uint8_t[]> bytes(new uint8_t[input.size()]);
  std::memcpy(bytes.get(), input.data(), input.size());
  try {
    const Header header = ddpd::hf::parse_header(bytes.get(), input.size(), kFileName);
    const std::string problem = broken_promise(header, bytes.get(), input.size(), stats.checksum);
    if (!problem.empty()) fail("accepted, but " + problem, input, stats.iterations, options);
    ++stats.accepted;
    stats.tensors += header.tensors.size();
  } catch (const SafetensorsError& e) {
    if (std::string(e.what()).rfind(std::string(kFileName) + ": ", 0) != 0) {
      fail(std::string("a refusal that does not name the file: ") + e.what(), input,
           stats.iterations, options);
    }
    ++stats.refused;
    stats.refusal_kinds.insert(refusal_kind(e.what()));
  } catch (const std::exception& e) {
    fail(std::string("an exception other than SafetensorsError: ") + e.what(), input,
         stats.iterations, options);
  } catch (...) {
    fail("a non-standard exception", input, stats.iterations, options);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const Options options = parse_options(argc, argv);
  Random random(options.seed);
  const std::vector<std::string> seeds = seed_files();
  for (const std::string& file : seeds) {
    ddpd::hf::parse_header(reinterpret_cast<const uint8_t*>(file.data()), file.size(), kFileName);
  }
  Stats stats;
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  const auto deadline = start + std::chrono::duration<double>(options.seconds);
  while (options.iterations ? stats.iterations < options.iterations : Clock::now() < deadline) {
    std::string input = random() % 3 == 0 ? generated_file(random) : pick(random, seeds);
    if (random() % 8 != 0) mutate(input, random);
    check(input, stats, options);
    ++stats.iterations;
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  std::printf(
      "ddpd-safetensors-fuzz: %llu inputs in %.1f s (%.0f/s), seed %llu: %llu accepted "
      "(%llu tensors, every span read, checksum %llu), %llu refused with %zu kinds of "
      "message, no other outcome\n",
      static_cast<unsigned long long>(stats.iterations), seconds,
      stats.iterations / std::max(seconds, 1e-9), static_cast<unsigned long long>(options.seed),
      static_cast<unsigned long long>(stats.accepted),
      static_cast<unsigned long long>(stats.tensors),
      static_cast<unsigned long long>(stats.checksum),
      static_cast<unsigned long long>(stats.refused), stats.refusal_kinds.size());
  return 0;
}
