// Hugging Face safetensors files, read and written without LibTorch: the checkpoints that
// `transformers` saves, so ddpd can load a pretrained model and export one that Python reads.
//
// The format (https://github.com/huggingface/safetensors), all integers little-endian:
//
//   bytes [0, 8)          u64 N, the header's length
//   bytes [8, 8 + N)      the header: UTF-8 JSON, one object (writers pad it with spaces)
//   bytes [8 + N, end)    the data area: every tensor's raw little-endian elements, row-major
//
// The header maps each tensor name to {"dtype": "F32", "shape": [2, 3], "data_offsets": [b, e]},
// where [b, e) are byte offsets into the data area (not into the file) and e - b is exactly
// numel × element size; an optional "__metadata__" key maps strings to strings (transformers
// writes {"format": "pt"}). A scalar has shape [] (one element); a tensor with a zero dimension
// has an empty span.
//
// The reader trusts nothing in a file: parse_header() checks every length, offset and product
// before anything indexes the bytes, so a hostile or truncated file is refused with a message
// and never read out of bounds (tests/load/safetensors_fuzz.cpp checks this).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace ddpd::hf {

// The element types ddpd reads and writes, spelled as the format spells them (dtype_name).
// The format's other types (U16, U32, U64, F8_*, C64, ...) are refused as unknown.
enum class StDtype { kF64, kF32, kF16, kBF16, kI64, kI32, kI16, kI8, kU8, kBool };

size_t element_size(StDtype dtype);     // bytes per element: BOOL is one byte
const char* dtype_name(StDtype dtype);  // "F64", "F32", "F16", "BF16", "I64", ..., "BOOL"

// One tensor of a header: where its bytes are, relative to the data area (Header::data_start).
struct TensorEntry {
  std::string name;
  StDtype dtype = StDtype::kF32;
  std::vector<int64_t> shape;  // [] for a scalar
  uint64_t begin = 0, end = 0;
  int64_t numel() const;  // product of shape; 1 for a scalar
};

// A malformed file (or a model directory whose files disagree). what() is
// "<file>: tensor '<name>': <reason>", or "<file>: <reason>" when no tensor is involved.
class SafetensorsError : public std::runtime_error {
 public:
  SafetensorsError(std::string file, std::string tensor, const std::string& reason);
  const std::string& file() const { return file_; }
  const std::string& tensor() const { return tensor_; }

 private:
  std::string file_;
  std::string tensor_;
};

// A validated header.
struct Header {
  std::vector<TensorEntry> tensors;  // sorted by begin (then end, then name)
  std::map<std::string, std::string> metadata;
  uint64_t data_start = 0;  // 8 + N: the data area's offset in the file
};

// Parses and validates the header of the `size` bytes at `bytes` (a whole file); `file` is only
// named in messages. Throws SafetensorsError unless all of these hold:
//   - size >= 8; N <= size - 8 and N <= 100 MiB;
//   - the header is valid UTF-8 JSON: one object, no key twice in any object, nested at most a
//     few levels deep, arrays of at most 1024 elements (no shape has more dimensions);
//   - "__metadata__", if present, is an object of strings;
//   - every other key is a tensor whose value has exactly "dtype" (a known dtype string),
//     "shape" (non-negative integers) and "data_offsets" (two unsigned integers, begin <= end);
//   - numel × element size == end - begin, computed without overflow;
//   - every span lies inside the data area (data_start + end <= size), and no two non-empty
//     spans overlap. Gaps between spans are accepted (the reference reader refuses them).
Header parse_header(const uint8_t* bytes, size_t size, const std::string& file);

// A safetensors file memory-mapped read-only (MAP_PRIVATE, PROT_READ) and validated with
// parse_header(), so only the pages of the tensors read are ever loaded. Move-only; unmaps on
// destruction. Throws std::runtime_error naming the path when the file cannot be opened or
// mapped, SafetensorsError when it is malformed.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(SafetensorsFile&& other) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&& other) noexcept;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const Header& header() const { return header_; }
  size_t size() const { return size_; }  // the file's length in bytes
  // The tensor called `name`, or nullptr.
  const TensorEntry* find(const std::string& name) const;
  // The first of the entry's end - begin bytes, inside the mapping (valid while this object
  // lives). Only as aligned as the file made it: copy out with memcpy rather than cast.
  // `entry` must be one of this file's header().tensors.
  const uint8_t* data(const TensorEntry& entry) const;
  // Drops the pages that only `entry` occupies from this process's memory (madvise DONTNEED; a
  // later data() reads them from the file again): a loader that copies tensors out one by one
  // keeps its resident memory at the model plus one tensor, not the model plus the file.
  void release(const TensorEntry& entry) const;

 private:
  void unmap();

  std::string path_;
  const uint8_t* bytes_ = nullptr;  // the mapping; nullptr once moved from
  size_t size_ = 0;
  Header header_;
  std::map<std::string, size_t> index_;  // name -> position in header_.tensors
};

// A tensor to write: `bytes` bytes at `data`, which must equal numel(shape) × element size.
struct TensorToWrite {
  std::string name;
  StDtype dtype = StDtype::kF32;
  std::vector<int64_t> shape;
  const void* data = nullptr;
  size_t bytes = 0;
};

// The first 8 + N bytes of the file that holds `tensors`: N, then the JSON header (metadata
// under "__metadata__" first, then the tensors in the given order) padded with spaces to a
// multiple of 8 bytes, as the reference writer does, so the data area starts 8-aligned. The
// tensors' spans are contiguous, in the given order. Throws std::invalid_argument naming `file`
// and the tensor when a name repeats or is "__metadata__", a dimension is negative, or bytes
// differ from numel × element size (or data is null with bytes > 0).
std::string safetensors_header(const std::vector<TensorToWrite>& tensors,
                               const std::map<std::string, std::string>& metadata,
                               const std::string& file);

// The whole file in memory: safetensors_header() followed by every tensor's bytes. For tests
// and the fuzzer; write_safetensors() streams the same bytes to disk instead.
std::string serialize_safetensors(const std::vector<TensorToWrite>& tensors,
                                  const std::map<std::string, std::string>& metadata);

// Writes `path` atomically: the bytes go to a temporary file beside it, which is flushed to disk
// and then renamed over `path`, so a reader sees the old file or the whole new one, never a
// part. Throws std::runtime_error naming the path on an I/O failure (the temporary is removed).
void write_file_atomically(const std::string& path,
                           const std::vector<std::pair<const void*, size_t>>& pieces);

// Writes the file serialize_safetensors() describes, atomically (write_file_atomically).
void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata);

}  // namespace ddpd::hf
