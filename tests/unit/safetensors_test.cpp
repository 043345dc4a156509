// Safetensors (core/src/hf): bitwise round trips of every dtype, each refusal of a malformed file
// naming the file and the tensor, sharded model directories, and the reference implementation
// (Python's safetensors on the build's interpreter) reading our files and writing files we read.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "hf/safetensors.h"
#include "hf/safetensors_dir.h"
#include "support/files.h"

#ifndef DDPD_PEER_PYTHON
#define DDPD_PEER_PYTHON "python3"
#endif

namespace ddpd::hf {
namespace {

namespace fs = std::filesystem;
using testing::read_file;

const std::string kFile = "weights.safetensors";  // the name parse_header's messages use

// A tensor and its little-endian bytes.
struct Sample {
  std::string name;
  StDtype dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

template <typename T>
std::vector<uint8_t> bytes_of(std::initializer_list<T> values) {
  std::vector<uint8_t> bytes(values.size() * sizeof(T));
  if (!bytes.empty()) std::memcpy(bytes.data(), values.begin(), bytes.size());
  return bytes;
}

// One tensor of each dtype, a scalar and an empty tensor: the same values as expected() in
// kPythonScript below.
std::vector<Sample> samples() {
  return {
      {"f64", StDtype::kF64, {2}, bytes_of<double>({1.5, -2.25})},
      {"f32", StDtype::kF32, {2, 3}, bytes_of<float>({0, 0.5, 1, 1.5, 2, 2.5})},
      {"f16", StDtype::kF16, {3}, bytes_of<uint16_t>({0x3C00, 0xC000, 0x3800})},  // 1 -2 0.5
      {"bf16", StDtype::kBF16, {3}, bytes_of<uint16_t>({0x3F80, 0xC000, 0x3F00})},
      {"i64", StDtype::kI64, {2}, bytes_of<int64_t>({-(int64_t{1} << 40), 7})},
      {"i32", StDtype::kI32, {2}, bytes_of<int32_t>({-5, 2147483647})},
      {"i16", StDtype::kI16, {2}, bytes_of<int16_t>({-300, 300})},
      {"i8", StDtype::kI8, {2}, bytes_of<int8_t>({-128, 127})},
      {"u8", StDtype::kU8, {3}, bytes_of<uint8_t>({0, 128, 255})},
      {"bool", StDtype::kBool, {3}, bytes_of<uint8_t>({1, 0, 1})},
      {"scalar", StDtype::kF32, {}, bytes_of<float>({3.25f})},
      {"empty", StDtype::kF32, {0, 4}, {}},
  };
}

std::vector<TensorToWrite> to_write(const std::vector<Sample>& samples) {
  std::vector<TensorToWrite> tensors;
  for (const Sample& s : samples) {
    tensors.push_back({s.name, s.dtype, s.shape, s.bytes.data(), s.bytes.size()});
  }
  return tensors;
}

// A file of `header` (JSON text, unpadded) and `data_bytes` bytes of data.
std::string raw_file(const std::string& header, size_t data_bytes) {
  std::string file(8, '\0');
  for (int i = 0; i < 8; ++i) file[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  return file + header + std::string(data_bytes, '\x5a');
}

// parse_header on an exact-size heap copy, so that a sanitizer would see a read past the end.
Header parse(const std::string& file) {
  std::unique_ptr<uint8_t[]> copy(new uint8_t[file.size() + 1]);
  std::memcpy(copy.get(), file.data(), file.size());
  return parse_header(copy.get(), file.size(), kFile);
}

// Expects parse() to refuse `file`, naming kFile, `tensor` (none when empty) and `reason`.
void expect_refused(const std::string& file, const std::string& tensor, const std::string& reason) {
  try {
    parse(file);
    ADD_FAILURE() << "accepted; expected: " << reason;
  } catch (const SafetensorsError& e) {
    const std::string prefix =
        tensor.empty() ? kFile + ": " : kFile + ": tensor '" + tensor + "': ";
    EXPECT_EQ(std::string(e.what()).rfind(prefix, 0), 0u) << e.what();
    EXPECT_NE(std::string(e.what()).find(reason), std::string::npos) << e.what();
    EXPECT_EQ(e.file(), kFile);
    EXPECT_EQ(e.tensor(), tensor);
  }
}

class TempDir : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "ddpd-safetensors-XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (fs::path(dir_) / name).string(); }

  std::string dir_;
};

void expect_same_tensor(const Sample& want, const TensorEntry& got, const uint8_t* data) {
  EXPECT_EQ(got.name, want.name);
  EXPECT_EQ(got.dtype, want.dtype) << want.name;
  EXPECT_EQ(got.shape, want.shape) << want.name;
  ASSERT_EQ(got.end - got.begin, want.bytes.size()) << want.name;
  EXPECT_EQ(std::memcmp(data, want.bytes.data(), want.bytes.size()), 0) << want.name;
}

// ---- round trips ----

using SafetensorsRoundTrip = TempDir;

TEST_F(SafetensorsRoundTrip, EveryDtypeScalarAndEmptyTensorComeBackBitwise) {
  const auto tensors = samples();
  const std::map<std::string, std::string> metadata{{"format", "pt"}, {"note", "ddpd"}};
  write_safetensors(path("a.safetensors"), to_write(tensors), metadata);
  const SafetensorsFile file(path("a.safetensors"));
  EXPECT_EQ(file.header().metadata, metadata);
  EXPECT_EQ(file.header().data_start % 8, 0u);  // the header is padded to 8 bytes
  ASSERT_EQ(file.header().tensors.size(), tensors.size());
  for (const Sample& want : tensors) {
    const TensorEntry* got = file.find(want.name);
    ASSERT_NE(got, nullptr) << want.name;
    expect_same_tensor(want, *got, file.data(*got));
  }
  EXPECT_EQ(file.find("scalar")->numel(), 1);
  EXPECT_EQ(file.find("empty")->numel(), 0);
  EXPECT_EQ(file.find("absent"), nullptr);
  EXPECT_EQ(read_file(path("a.safetensors")), serialize_safetensors(to_write(tensors), metadata));
  EXPECT_EQ(file.size(), read_file(path("a.safetensors")).size());
}

TEST_F(SafetensorsRoundTrip, SpansAreContiguousInTheGivenOrder) {
  const Header header = parse(serialize_safetensors(to_write(samples()), {}));
  uint64_t offset = 0;
  std::vector<std::string> order;
  for (const TensorEntry& entry : header.tensors) {
    EXPECT_EQ(entry.begin, offset) << entry.name;
    offset = entry.end;
    order.push_back(entry.name);
  }
  std::vector<std::string> given;
  for (const Sample& s : samples()) given.push_back(s.name);
  EXPECT_EQ(order, given);
  EXPECT_TRUE(header.metadata.empty());
}

TEST_F(SafetensorsRoundTrip, NoTensorsIsAValidFile) {
  write_safetensors(path("none.safetensors"), {}, {{"format", "pt"}});
  const SafetensorsFile file(path("none.safetensors"));
  EXPECT_TRUE(file.header().tensors.empty());
  EXPECT_EQ(file.header().metadata.at("format"), "pt");
}

TEST_F(SafetensorsRoundTrip, MovedFileKeepsItsMapping) {
  write_safetensors(path("m.safetensors"), to_write(samples()), {});
  SafetensorsFile first(path("m.safetensors"));
  SafetensorsFile second(std::move(first));
  const TensorEntry* entry = second.find("f64");
  ASSERT_NE(entry, nullptr);
  expect_same_tensor(samples()[0], *entry, second.data(*entry));
  SafetensorsFile third(path("m.safetensors"));
  third = std::move(second);
  expect_same_tensor(samples()[0], *third.find("f64"), third.data(*third.find("f64")));
}

TEST_F(SafetensorsRoundTrip, WriterRefusesBadTensorsNamingThem) {
  const std::vector<float> six(6);
  auto refused = [&](const TensorToWrite& tensor, const std::string& reason) {
    try {
      write_safetensors(path("bad.safetensors"), {tensor}, {});
      ADD_FAILURE() << "written: " << reason;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(path("bad.safetensors") + ": tensor '" + tensor.name),
                std::string::npos)
          << e.what();
      EXPECT_NE(std::string(e.what()).find(reason), std::string::npos) << e.what();
    }
    EXPECT_FALSE(fs::exists(path("bad.safetensors")));
  };
  refused({"w", StDtype::kF32, {2, 3}, six.data(), 20}, "needs 24 bytes, given 20");
  refused({"w", StDtype::kF32, {-1, 3}, six.data(), 24}, "negative dimension");
  refused({"__metadata__", StDtype::kF32, {6}, six.data(), 24}, "reserved");
  refused({"w", StDtype::kF32, {6}, nullptr, 24}, "no data");
  const TensorToWrite w{"w", StDtype::kF32, {6}, six.data(), 24};
  EXPECT_THROW(write_safetensors(path("bad.safetensors"), {w, w}, {}), std::invalid_argument);
}

TEST_F(SafetensorsRoundTrip, UnwritablePathIsNamed) {
  try {
    write_safetensors(path("no/such/dir/a.safetensors"), {}, {});
    ADD_FAILURE() << "written";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(path("no/such/dir/a.safetensors")), std::string::npos)
        << e.what();
  }
}

// ---- refusals ----

TEST(SafetensorsRefusal, TruncationAtEveryLengthIsRefusedInBounds) {
  const std::string whole = serialize_safetensors(to_write(samples()), {{"format", "pt"}});
  const Header header = parse(whole);
  for (size_t length = 0; length < whole.size(); ++length) {
    try {
      parse(whole.substr(0, length));
      ADD_FAILURE() << "accepted at length " << length;
    } catch (const SafetensorsError& e) {
      const std::string what = e.what();
      EXPECT_EQ(what.rfind(kFile + ": ", 0), 0u) << what;
      if (length < 8) {
        EXPECT_NE(what.find("too short"), std::string::npos) << what;
      } else if (length < header.data_start) {
        EXPECT_NE(what.find("runs past the end of the file"), std::string::npos) << what;
      } else {  // the data area is cut: a tensor's span runs past it
        EXPECT_FALSE(e.tensor().empty()) << what;
        EXPECT_NE(what.find("tensor '" + e.tensor() + "': data_offsets"), std::string::npos);
        EXPECT_NE(what.find("run past the end of the data area"), std::string::npos) << what;
      }
    }
  }
}

TEST(SafetensorsRefusal, HeaderLengthBeyondTheFileOrTheLimit) {
  std::string file = raw_file("{}", 0);
  file[0] = 3;  // 3 bytes of header, 2 present
  expect_refused(file, "", "the header length 3 runs past the end of the file (10 bytes)");
  std::string huge(8 + (100u << 20) + 1, ' ');
  const uint64_t length = (100u << 20) + 1;
  std::memcpy(huge.data(), &length, 8);
  expect_refused(huge, "", "exceeds the 100 MiB limit");
}

TEST(SafetensorsRefusal, HeaderThatIsNotAJsonObject) {
  expect_refused(raw_file(R"({"a": {"dtype": )", 0), "", "the header is not valid JSON");
  expect_refused(raw_file("[1, 2]", 0), "", "the header is a JSON array, not an object");
  expect_refused(raw_file("{\"\xff\": 1}", 0), "", "not valid JSON");  // not UTF-8
  expect_refused(raw_file("", 0), "", "not valid JSON");
  expect_refused(raw_file(std::string(20, '[') + std::string(20, ']'), 0), "", "nests deeper than");
}

TEST(SafetensorsRefusal, UnknownDtype) {
  expect_refused(
      raw_file(R"({"w": {"dtype": "F8_E4M3", "shape": [2], "data_offsets": [0, 2]}})", 2), "w",
      "unknown dtype \"F8_E4M3\" (ddpd reads F64, F32, F16, BF16, I64");
  expect_refused(raw_file(R"({"w": {"dtype": 4, "shape": [1], "data_offsets": [0, 4]}})", 4), "w",
                 "\"dtype\" is a JSON number, not a string");
}

TEST(SafetensorsRefusal, ShapeTimesElementSizeMustEqualTheSpan) {
  expect_refused(
      raw_file(R"({"w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 20]}})", 24), "w",
      "shape [2, 3] of F32 needs 24 bytes but data_offsets [0, 20] hold 20");
  expect_refused(raw_file(R"({"s": {"dtype": "I64", "shape": [], "data_offsets": [0, 0]}})", 8),
                 "s", "shape [] of I64 needs 8 bytes");
}

TEST(SafetensorsRefusal, OverlappingSpansNameBothTensors) {
  expect_refused(raw_file(R"({"a": {"dtype": "U8", "shape": [8], "data_offsets": [0, 8]},
                              "b": {"dtype": "U8", "shape": [8], "data_offsets": [4, 12]}})",
                          12),
                 "b", "data_offsets [4, 12] overlap tensor 'a' at [0, 8]");
  expect_refused(raw_file(R"({"a": {"dtype": "U8", "shape": [8], "data_offsets": [0, 8]},
                              "b": {"dtype": "U8", "shape": [8], "data_offsets": [0, 8]}})",
                          8),
                 "b", "overlap tensor 'a'");
}

TEST(SafetensorsRefusal, EmptySpansOverlapNothingAndGapsAreAccepted) {
  const Header header =
      parse(raw_file(R"({"a": {"dtype": "U8", "shape": [8], "data_offsets": [0, 8]},
                         "e": {"dtype": "F32", "shape": [0, 5], "data_offsets": [4, 4]},
                         "f": {"dtype": "F32", "shape": [0], "data_offsets": [4, 4]},
                         "b": {"dtype": "U8", "shape": [2], "data_offsets": [10, 12]}})",
                     12));
  ASSERT_EQ(header.tensors.size(), 4u);
  EXPECT_EQ(header.tensors[0].name, "a");  // sorted by begin
  EXPECT_EQ(header.tensors[3].name, "b");
}

TEST(SafetensorsRefusal, SpanOutsideTheFile) {
  expect_refused(raw_file(R"({"w": {"dtype": "U8", "shape": [16], "data_offsets": [0, 16]}})", 15),
                 "w",
                 "data_offsets [0, 16] run past the end of the data area, which holds 15 bytes");
  expect_refused(raw_file(R"({"w": {"dtype": "U8", "shape": [0], "data_offsets": [99, 99]}})", 15),
                 "w", "run past the end of the data area");
}

TEST(SafetensorsRefusal, NegativeOrFractionalDimension) {
  expect_refused(
      raw_file(R"({"w": {"dtype": "F32", "shape": [2, -3], "data_offsets": [0, 0]}})", 0), "w",
      "\"shape\"[1] is -3: a dimension cannot be negative");
  expect_refused(raw_file(R"({"w": {"dtype": "F32", "shape": [1.5], "data_offsets": [0, 0]}})", 0),
                 "w", "\"shape\"[0] is 1.5, not a non-negative integer");
  expect_refused(raw_file(R"({"w": {"dtype": "F32", "shape": "2", "data_offsets": [0, 0]}})", 0),
                 "w", "\"shape\" is a JSON string, not an array of integers");
}

TEST(SafetensorsRefusal, HugeDimensionsOverflow) {
  expect_refused(raw_file(R"({"w": {"dtype": "F32", "shape": [4294967296, 4294967296],
                                     "data_offsets": [0, 0]}})",
                          0),
                 "w", "shape [4294967296, 4294967296] of F32 needs more than 2^64 bytes");
  expect_refused(raw_file(R"({"w": {"dtype": "U8", "shape": [18446744073709551615],
                                     "data_offsets": [0, 0]}})",
                          0),
                 "w", "larger than 2^63 - 1");
  // A zero dimension makes the product 0 whatever the others are.
  EXPECT_NO_THROW(parse(raw_file(R"({"w": {"dtype": "F32", "shape": [4294967296, 4294967296, 0],
                                          "data_offsets": [0, 0]}})",
                                 0)));
  expect_refused(raw_file(R"({"w": {"dtype": "U8", "shape": [1e400], "data_offsets": [0, 0]}})", 0),
                 "", "not valid JSON");
}

TEST(SafetensorsRefusal, EntryMustHaveExactlyItsThreeKeys) {
  expect_refused(raw_file(R"({"w": {"dtype": "U8", "shape": [1]}})", 1), "w",
                 "the entry has no \"data_offsets\"");
  expect_refused(
      raw_file(R"({"w": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1], "x": 1}})", 1), "w",
      "unexpected key 'x'");
  expect_refused(raw_file(R"({"w": [1, 2]})", 0), "w", "the entry is a JSON array, not an object");
  expect_refused(raw_file(R"({"w": {"dtype": "U8", "shape": [1], "data_offsets": [0]}})", 1), "w",
                 "\"data_offsets\" is [0], not [begin, end] of two unsigned integers");
  expect_refused(raw_file(R"({"w": {"dtype": "U8", "shape": [1], "data_offsets": [-1, 0]}})", 1),
                 "w", "not [begin, end]");
  expect_refused(raw_file(R"({"w": {"dtype": "U8", "shape": [1], "data_offsets": [2, 1]}})", 2),
                 "w", "data_offsets [2, 1] end before they begin");
}

TEST(SafetensorsRefusal, RepeatedNamesAndKeys) {
  expect_refused(raw_file(R"({"w": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]},
                              "w": {"dtype": "U8", "shape": [1], "data_offsets": [1, 2]}})",
                          2),
                 "w", "the header names this tensor twice");
  expect_refused(
      raw_file(R"({"w": {"dtype": "U8", "dtype": "F32", "shape": [1], "data_offsets": [0, 1]}})",
               1),
      "w", "key 'dtype' appears twice in its entry");
}

TEST(SafetensorsRefusal, MetadataMustMapStringsToStrings) {
  expect_refused(raw_file(R"({"__metadata__": {"format": 1}})", 0), "",
                 "__metadata__['format'] is a JSON number, not a string");
  expect_refused(raw_file(R"({"__metadata__": ["pt"]})", 0), "",
                 "__metadata__ is a JSON array, not an object of strings");
  const Header header = parse(raw_file(R"({"__metadata__": {"format": "pt"}})", 0));
  EXPECT_EQ(header.metadata.at("format"), "pt");
}

TEST(SafetensorsRefusal, LongArraysAreRefusedBeforeTheyGrow) {
  std::string shape = "[1";
  for (int i = 0; i < 2000; ++i) shape += ",1";
  expect_refused(raw_file(R"({"w": {"dtype": "U8", "shape": )" + shape + "]}}", 0), "w",
                 "more than 1024 elements");
}

using SafetensorsFileOpen = TempDir;

TEST_F(SafetensorsFileOpen, MissingEmptyAndMalformedFilesAreNamed) {
  try {
    SafetensorsFile missing(path("missing.safetensors"));
    ADD_FAILURE();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(path("missing.safetensors") + ": cannot open"),
              std::string::npos);
  }
  std::ofstream(path("empty.safetensors")).close();
  try {
    SafetensorsFile empty(path("empty.safetensors"));
    ADD_FAILURE();
  } catch (const SafetensorsError& e) {
    EXPECT_EQ(e.file(), path("empty.safetensors"));
    EXPECT_NE(std::string(e.what()).find("the file is 0 bytes"), std::string::npos);
  }
  std::ofstream(path("bad.safetensors"))
      << raw_file(R"({"w": {"dtype": "Q4", "shape": [1], "data_offsets": [0, 1]}})", 1);
  try {
    SafetensorsFile bad(path("bad.safetensors"));
    ADD_FAILURE();
  } catch (const SafetensorsError& e) {
    EXPECT_EQ(std::string(e.what()).rfind(path("bad.safetensors") + ": tensor 'w': unknown", 0), 0u)
        << e.what();
  }
}

// ---- model directories ----

using SafetensorsDirTest = TempDir;

std::vector<std::string> sorted_names(const std::vector<Sample>& tensors) {
  std::vector<std::string> names;
  for (const Sample& s : tensors) names.push_back(s.name);
  std::sort(names.begin(), names.end());
  return names;
}

TEST_F(SafetensorsDirTest, SmallModelIsOneFileWithFormatPt) {
  const auto tensors = samples();
  write_safetensors_dir(dir_, to_write(tensors), 1 << 20);
  EXPECT_TRUE(fs::exists(path("model.safetensors")));
  EXPECT_FALSE(fs::exists(path("model.safetensors.index.json")));
  EXPECT_EQ(SafetensorsFile(path("model.safetensors")).header().metadata,
            (std::map<std::string, std::string>{{"format", "pt"}}));
  const SafetensorsDir model(dir_);
  EXPECT_EQ(model.names(), sorted_names(tensors));
  for (const Sample& want : tensors) {
    expect_same_tensor(want, model.entry(want.name), model.data(want.name));
    EXPECT_EQ(model.file_of(want.name), path("model.safetensors"));
  }
}

// 16 + 32 + 16 fill the 64-byte limit; 100 goes alone; 8 + 8 share the last shard.
std::vector<Sample> shard_samples() {
  std::vector<Sample> tensors;
  for (const auto& [name, bytes] : std::vector<std::pair<std::string, size_t>>{
           {"a", 16}, {"b", 32}, {"c", 16}, {"d", 100}, {"e", 8}, {"f", 8}}) {
    std::vector<uint8_t> data(bytes);
    for (size_t i = 0; i < bytes; ++i) data[i] = static_cast<uint8_t>(name[0] * 7 + i);
    tensors.push_back({name, StDtype::kU8, {static_cast<int64_t>(bytes)}, data});
  }
  return tensors;
}

TEST_F(SafetensorsDirTest, LargeModelIsShardedGreedilyWithAnIndex) {
  const auto tensors = shard_samples();
  write_safetensors_dir(dir_, to_write(tensors), 64);
  EXPECT_FALSE(fs::exists(path("model.safetensors")));
  const auto index = nlohmann::json::parse(read_file(path("model.safetensors.index.json")));
  EXPECT_EQ(index["metadata"]["total_size"], 180);
  const std::string one = "model-00001-of-00003.safetensors";
  const std::string two = "model-00002-of-00003.safetensors";
  const std::string three = "model-00003-of-00003.safetensors";
  EXPECT_EQ(
      index["weight_map"],
      (nlohmann::json{{"a", one}, {"b", one}, {"c", one}, {"d", two}, {"e", three}, {"f", three}}));
  for (const std::string& shard : {one, two, three}) {
    EXPECT_EQ(SafetensorsFile(path(shard)).header().metadata.at("format"), "pt") << shard;
  }
  const SafetensorsDir model(dir_);
  EXPECT_EQ(model.names(), sorted_names(tensors));
  for (const Sample& want : tensors) {
    expect_same_tensor(want, model.entry(want.name), model.data(want.name));
    EXPECT_EQ(model.file_of(want.name), path(index["weight_map"][want.name].get<std::string>()));
  }
  EXPECT_EQ(shard_file_name(12, 345), "model-00012-of-00345.safetensors");
}

TEST_F(SafetensorsDirTest, ExportReplacesThePreviousOneAndKeepsOtherFiles) {
  std::ofstream(path("config.json")) << "{}";
  std::ofstream(path("adapter.safetensors")) << "not ours";
  write_safetensors_dir(dir_, to_write(shard_samples()), 64);   // 3 shards
  write_safetensors_dir(dir_, to_write(shard_samples()), 120);  // 2 shards
  std::vector<std::string> files;
  for (const auto& item : fs::directory_iterator(dir_)) files.push_back(item.path().filename());
  std::sort(files.begin(), files.end());
  EXPECT_EQ(files, (std::vector<std::string>{
                       "adapter.safetensors", "config.json", "model-00001-of-00002.safetensors",
                       "model-00002-of-00002.safetensors", "model.safetensors.index.json"}));
  write_safetensors_dir(dir_, to_write(shard_samples()), 1000);  // one file
  EXPECT_TRUE(fs::exists(path("model.safetensors")));
  EXPECT_FALSE(fs::exists(path("model.safetensors.index.json")));
  EXPECT_FALSE(fs::exists(path("model-00001-of-00002.safetensors")));
  EXPECT_EQ(SafetensorsDir(dir_).names().size(), 6u);
}

TEST_F(SafetensorsDirTest, BadTensorLeavesThePreviousExportAlone) {
  write_safetensors_dir(dir_, to_write(shard_samples()), 64);
  const std::vector<float> six(6);
  EXPECT_THROW(write_safetensors_dir(dir_, {{"w", StDtype::kF32, {6}, six.data(), 4}}, 64),
               std::invalid_argument);
  EXPECT_EQ(SafetensorsDir(dir_).names().size(), 6u);
}

// Expects SafetensorsDir(dir) to refuse, the message starting with `prefix` and holding `reason`.
void expect_dir_refused(const std::string& dir, const std::string& prefix,
                        const std::string& reason) {
  try {
    SafetensorsDir model(dir);
    ADD_FAILURE() << "accepted; expected: " << reason;
  } catch (const SafetensorsError& e) {
    EXPECT_EQ(std::string(e.what()).rfind(prefix, 0), 0u) << e.what();
    EXPECT_NE(std::string(e.what()).find(reason), std::string::npos) << e.what();
  }
}

TEST_F(SafetensorsDirTest, PickledWeightsAreRefusedWithTheConversionCommand) {
  expect_dir_refused(dir_, dir_ + ": ", "no model.safetensors or model.safetensors.index.json");
  std::ofstream(path("pytorch_model.bin")) << "pickle";
  expect_dir_refused(dir_, path("pytorch_model.bin") + ": ",
                     "pickled PyTorch weights, which ddpd does not read (safetensors only); "
                     "convert them once with: python -c \"from transformers import "
                     "AutoModelForCausalLM as M; M.from_pretrained('" +
                         dir_ + "').save_pretrained('" + dir_ + "', safe_serialization=True)\"");
  fs::remove(path("pytorch_model.bin"));
  std::ofstream(path("pytorch_model-00001-of-00002.bin")) << "pickle";
  expect_dir_refused(dir_, path("pytorch_model-00001-of-00002.bin") + ": ", "pickled PyTorch");
}

TEST_F(SafetensorsDirTest, IndexNamingAMissingShard) {
  write_safetensors_dir(dir_, to_write(shard_samples()), 64);
  fs::remove(path("model-00002-of-00003.safetensors"));
  expect_dir_refused(dir_, path("model.safetensors.index.json") + ": tensor 'd': ",
                     "its file model-00002-of-00003.safetensors does not exist in " + dir_);
}

void rewrite_weight_map(const std::string& index_path, const std::string& tensor,
                        const nlohmann::json& file) {
  auto index = nlohmann::json::parse(read_file(index_path));
  if (file.is_null()) {
    index["weight_map"].erase(tensor);
  } else {
    index["weight_map"][tensor] = file;
  }
  std::ofstream(index_path) << index.dump();
}

TEST_F(SafetensorsDirTest, IndexAndShardsMustAgree) {
  write_safetensors_dir(dir_, to_write(shard_samples()), 64);
  const std::string index = path("model.safetensors.index.json");
  rewrite_weight_map(index, "z", "model-00001-of-00003.safetensors");
  expect_dir_refused(dir_, path("model-00001-of-00003.safetensors") + ": tensor 'z': ",
                     "model.safetensors.index.json maps it to this file, which lacks it");
  rewrite_weight_map(index, "z", nullptr);
  rewrite_weight_map(index, "e", nullptr);
  expect_dir_refused(dir_, path("model-00003-of-00003.safetensors") + ": tensor 'e': ",
                     "in this file, but model.safetensors.index.json does not map it here");
  rewrite_weight_map(index, "e", "../model-00003-of-00003.safetensors");
  expect_dir_refused(dir_, index + ": tensor 'e': ", "is not a file name in the model directory");
  std::ofstream(index) << R"({"weight_map": [1]})";
  expect_dir_refused(dir_, index + ": ", "no \"weight_map\" object");
  std::ofstream(index) << "{";
  expect_dir_refused(dir_, index + ": ", "not valid JSON");
}

TEST_F(SafetensorsDirTest, AbsentTensorIsNamed) {
  write_safetensors_dir(dir_, to_write(samples()), 1 << 20);
  const SafetensorsDir model(dir_);
  EXPECT_FALSE(model.contains("nope"));
  try {
    model.entry("nope");
    ADD_FAILURE();
  } catch (const SafetensorsError& e) {
    EXPECT_EQ(std::string(e.what()), dir_ + ": tensor 'nope': no such tensor");
  }
}

// ---- the reference implementation ----

// Checks (mode "read") or writes (mode "write") samples() with safetensors.torch; exits 77
// when the interpreter cannot import it.
const char* kPythonScript = R"(import sys
try:
    import torch
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file
except ImportError as e:
    print("cannot import safetensors.torch:", e)
    sys.exit(77)
mode, path = sys.argv[1], sys.argv[2]
expected = {
    "f64": torch.tensor([1.5, -2.25], dtype=torch.float64),
    "f32": (torch.arange(6, dtype=torch.float32) * 0.5).reshape(2, 3),
    "f16": torch.tensor([1.0, -2.0, 0.5], dtype=torch.float16),
    "bf16": torch.tensor([1.0, -2.0, 0.5], dtype=torch.bfloat16),
    "i64": torch.tensor([-(1 << 40), 7], dtype=torch.int64),
    "i32": torch.tensor([-5, 2**31 - 1], dtype=torch.int32),
    "i16": torch.tensor([-300, 300], dtype=torch.int16),
    "i8": torch.tensor([-128, 127], dtype=torch.int8),
    "u8": torch.tensor([0, 128, 255], dtype=torch.uint8),
    "bool": torch.tensor([True, False, True]),
    "scalar": torch.tensor(3.25, dtype=torch.float32),
    "empty": torch.zeros(0, 4, dtype=torch.float32),
}
if mode == "read":
    got = load_file(path)
    assert sorted(got) == sorted(expected), (sorted(got), sorted(expected))
    for name, want in expected.items():
        assert got[name].dtype == want.dtype, (name, got[name].dtype)
        assert got[name].shape == want.shape, (name, got[name].shape)
        assert torch.equal(got[name], want), (name, got[name])
    with safe_open(path, "pt") as f:
        assert f.metadata() == {"format": "pt", "note": "ddpd"}, f.metadata()
else:
    save_file(expected, path, metadata={"format": "pt", "by": "safetensors.torch"})
print("ok")
)";

// Runs the script on the build's interpreter: its exit status and output.
std::pair<int, std::string> run_python(const std::string& script, const std::string& mode,
                                       const std::string& file) {
  const std::string command =
      std::string("'") + DDPD_PEER_PYTHON + "' '" + script + "' " + mode + " '" + file + "' 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return {-1, "popen failed"};
  std::string output;
  char buffer[4096];
  while (size_t n = fread(buffer, 1, sizeof buffer, pipe)) output.append(buffer, n);
  const int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, output};
}

using SafetensorsPython = TempDir;

TEST_F(SafetensorsPython, ReferenceReaderReadsOurFile) {
  std::ofstream(path("check.py")) << kPythonScript;
  write_safetensors(path("ours.safetensors"), to_write(samples()),
                    {{"format", "pt"}, {"note", "ddpd"}});
  const auto [status, output] = run_python(path("check.py"), "read", path("ours.safetensors"));
  if (status == 77 || status == 127) GTEST_SKIP() << DDPD_PEER_PYTHON << ": " << output;
  EXPECT_EQ(status, 0) << output;
  EXPECT_NE(output.find("ok"), std::string::npos) << output;
}

TEST_F(SafetensorsPython, WeReadTheReferenceWritersFile) {
  std::ofstream(path("check.py")) << kPythonScript;
  const auto [status, output] = run_python(path("check.py"), "write", path("theirs.safetensors"));
  if (status == 77 || status == 127) GTEST_SKIP() << DDPD_PEER_PYTHON << ": " << output;
  ASSERT_EQ(status, 0) << output;
  const SafetensorsFile file(path("theirs.safetensors"));
  EXPECT_EQ(file.header().metadata,
            (std::map<std::string, std::string>{{"format", "pt"}, {"by", "safetensors.torch"}}));
  ASSERT_EQ(file.header().tensors.size(), samples().size());
  for (const Sample& want : samples()) {
    const TensorEntry* got = file.find(want.name);
    ASSERT_NE(got, nullptr) << want.name;
    expect_same_tensor(want, *got, file.data(*got));
  }
}

}  // namespace
}  // namespace ddpd::hf
