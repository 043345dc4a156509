// Safetensors parsing, validation and writing (the format is described in safetensors.h).
#include "hf/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <set>
#include <tuple>

#include <nlohmann/json.hpp>

namespace ddpd::hf {
namespace {

using Json = nlohmann::json;

constexpr uint64_t kMaxHeaderBytes = 100ull << 20;  // 100 MiB, as the reference reader
// A valid header nests three levels (object, entry, shape) and no shape has more dimensions than
// this; the limits stop a hostile header from building a huge or deep document.
constexpr size_t kMaxHeaderDepth = 8;
constexpr size_t kMaxArrayElements = 1024;
constexpr size_t kMaxNameInMessage = 256;
constexpr const char* kMetadataKey = "__metadata__";

struct DtypeInfo {
  StDtype dtype;
  const char* name;
  size_t size;
};
constexpr DtypeInfo kDtypes[] = {
    {StDtype::kF64, "F64", 8},   {StDtype::kF32, "F32", 4}, {StDtype::kF16, "F16", 2},
    {StDtype::kBF16, "BF16", 2}, {StDtype::kI64, "I64", 8}, {StDtype::kI32, "I32", 4},
    {StDtype::kI16, "I16", 2},   {StDtype::kI8, "I8", 1},   {StDtype::kU8, "U8", 1},
    {StDtype::kBool, "BOOL", 1},
};

const DtypeInfo& info_of(StDtype dtype) {
  for (const DtypeInfo& info : kDtypes) {
    if (info.dtype == dtype) return info;
  }
  throw std::invalid_argument("safetensors: dtype " + std::to_string(static_cast<int>(dtype)) +
                              " is not a StDtype");
}

std::string known_dtypes() {
  std::string list;
  for (const DtypeInfo& info : kDtypes) list += std::string(list.empty() ? "" : ", ") + info.name;
  return list;
}

// "<file>: tensor '<name>': <reason>", the name cut short.
std::string error_text(const std::string& file, const std::string& tensor,
                       const std::string& reason) {
  if (tensor.empty()) return file + ": " + reason;
  const std::string shown =
      tensor.size() <= kMaxNameInMessage ? tensor : tensor.substr(0, kMaxNameInMessage) + "...";
  return file + ": tensor '" + shown + "': " + reason;
}

// A JSON value for a message: its text, cut short.
std::string excerpt(const Json& value) {
  std::string text = value.dump();
  return text.size() <= 40 ? text : text.substr(0, 40) + "...";
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

std::string span_text(uint64_t begin, uint64_t end) {
  return "[" + std::to_string(begin) + ", " + std::to_string(end) + "]";
}

uint64_t read_u64_le(const uint8_t* bytes) {
  uint64_t value = 0;
  for (int i = 7; i >= 0; --i) value = (value << 8) | bytes[i];
  return value;
}

void append_u64_le(std::string& out, uint64_t value) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

// Watches nlohmann's parse events: refuses a key repeated within one object (the DOM would keep
// only the last), and nesting or arrays beyond the limits above, before the DOM grows.
class HeaderParseGuard {
 public:
  explicit HeaderParseGuard(const std::string& file) : file_(file) {}

  bool operator()(int depth, Json::parse_event_t event, Json& parsed) {
    using Event = Json::parse_event_t;
    if (event == Event::object_start || event == Event::array_start || event == Event::value) {
      count_array_element();
    }
    switch (event) {
      case Event::object_start:
      case Event::array_start:
        if (open_.size() >= kMaxHeaderDepth) {
          throw SafetensorsError(
              file_, tensor_,
              "the header nests deeper than " + std::to_string(kMaxHeaderDepth) + " levels");
        }
        open_.push_back({event == Event::array_start, {}, 0});
        break;
      case Event::object_end:
      case Event::array_end:
        if (!open_.empty()) open_.pop_back();
        break;
      case Event::key:
        on_key(depth, parsed.get<std::string>());
        break;
      case Event::value:
        break;
    }
    return true;
  }

 private:
  struct Container {
    bool is_array;
    std::set<std::string> keys;
    size_t elements;
  };

  void count_array_element() {
    if (open_.empty() || !open_.back().is_array) return;
    if (++open_.back().elements > kMaxArrayElements) {
      throw SafetensorsError(file_, tensor_,
                             "an array in the header has more than " +
                                 std::to_string(kMaxArrayElements) + " elements");
    }
  }

  void on_key(int depth, const std::string& key) {
    if (depth == 1) tensor_ = key;
    if (open_.empty() || open_.back().is_array) return;
    if (!open_.back().keys.insert(key).second) {
      if (depth == 1) throw SafetensorsError(file_, key, "the header names this tensor twice");
      throw SafetensorsError(file_, tensor_, "key '" + key + "' appears twice in its entry");
    }
  }

  const std::string& file_;
  std::string tensor_;  // the top-level key being parsed, for messages
  std::vector<Container> open_;
};

Json parse_json_header(const uint8_t* text, size_t length, const std::string& file) {
  HeaderParseGuard guard(file);
  Json header;
  try {
    header = Json::parse(text, text + length, std::ref(guard));
  } catch (const Json::exception& e) {
    throw SafetensorsError(file, "", std::string("the header is not valid JSON: ") + e.what());
  }
  if (!header.is_object()) {
    throw SafetensorsError(
        file, "", std::string("the header is a JSON ") + header.type_name() + ", not an object");
  }
  return header;
}

std::map<std::string, std::string> parse_metadata(const Json& value, const std::string& file) {
  if (!value.is_object()) {
    throw SafetensorsError(file, "",
                           std::string(kMetadataKey) + " is a JSON " + value.type_name() +
                               ", not an object of strings");
  }
  std::map<std::string, std::string> metadata;
  for (const auto& [key, item] : value.items()) {
    if (!item.is_string()) {
      throw SafetensorsError(file, "",
                             std::string(kMetadataKey) + "['" + key + "'] is a JSON " +
                                 item.type_name() + ", not a string");
    }
    metadata[key] = item.get<std::string>();
  }
  return metadata;
}

StDtype parse_dtype(const Json& value, const std::string& file, const std::string& tensor) {
  if (!value.is_string()) {
    throw SafetensorsError(
        file, tensor, std::string("\"dtype\" is a JSON ") + value.type_name() + ", not a string");
  }
  const std::string name = value.get<std::string>();
  for (const DtypeInfo& info : kDtypes) {
    if (name == info.name) return info.dtype;
  }
  throw SafetensorsError(
      file, tensor, "unknown dtype " + excerpt(value) + " (ddpd reads " + known_dtypes() + ")");
}

std::vector<int64_t> parse_shape(const Json& value, const std::string& file,
                                 const std::string& tensor) {
  if (!value.is_array()) {
    throw SafetensorsError(
        file, tensor,
        std::string("\"shape\" is a JSON ") + value.type_name() + ", not an array of integers");
  }
  std::vector<int64_t> shape;
  for (size_t i = 0; i < value.size(); ++i) {
    const Json& dim = value[i];
    const std::string where = "\"shape\"[" + std::to_string(i) + "] is " + excerpt(dim);
    if (dim.is_number_integer() && !dim.is_number_unsigned() && dim.get<int64_t>() < 0) {
      throw SafetensorsError(file, tensor, where + ": a dimension cannot be negative");
    }
    if (!dim.is_number_unsigned() && !dim.is_number_integer()) {
      throw SafetensorsError(file, tensor, where + ", not a non-negative integer");
    }
    const uint64_t size = dim.is_number_unsigned() ? dim.get<uint64_t>() : 0;
    if (size > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      throw SafetensorsError(file, tensor, where + ": larger than 2^63 - 1");
    }
    shape.push_back(static_cast<int64_t>(size));
  }
  return shape;
}

std::pair<uint64_t, uint64_t> parse_offsets(const Json& value, const std::string& file,
                                            const std::string& tensor) {
  if (!value.is_array() || value.size() != 2 || !value[0].is_number_unsigned() ||
      !value[1].is_number_unsigned()) {
    throw SafetensorsError(
        file, tensor,
        "\"data_offsets\" is " + excerpt(value) + ", not [begin, end] of two unsigned integers");
  }
  const uint64_t begin = value[0].get<uint64_t>(), end = value[1].get<uint64_t>();
  if (begin > end) {
    throw SafetensorsError(file, tensor,
                           "data_offsets " + span_text(begin, end) + " end before they begin");
  }
  return {begin, end};
}

// numel × element size into `bytes` (0 when a dimension is 0); false when it overflows 64 bits.
// The dimensions must be non-negative.
bool checked_byte_size(StDtype dtype, const std::vector<int64_t>& shape, uint64_t* bytes) {
  *bytes = 0;
  if (std::count(shape.begin(), shape.end(), 0) > 0) return true;
  uint64_t product = element_size(dtype);
  for (int64_t dim : shape) {
    if (__builtin_mul_overflow(product, static_cast<uint64_t>(dim), &product)) return false;
  }
  *bytes = product;
  return true;
}

void check_span_matches_shape(const TensorEntry& entry, const std::string& file) {
  const std::string what = "shape " + shape_text(entry.shape) + " of " + dtype_name(entry.dtype);
  uint64_t bytes = 0;
  if (!checked_byte_size(entry.dtype, entry.shape, &bytes)) {
    throw SafetensorsError(file, entry.name, what + " needs more than 2^64 bytes");
  }
  if (bytes != entry.end - entry.begin) {
    throw SafetensorsError(file, entry.name,
                           what + " needs " + std::to_string(bytes) + " bytes but data_offsets " +
                               span_text(entry.begin, entry.end) + " hold " +
                               std::to_string(entry.end - entry.begin));
  }
}

TensorEntry parse_entry(const std::string& name, const Json& value, const std::string& file) {
  if (!value.is_object()) {
    throw SafetensorsError(file, name,
                           std::string("the entry is a JSON ") + value.type_name() +
                               ", not an object of dtype, shape and data_offsets");
  }
  for (const char* key : {"dtype", "shape", "data_offsets"}) {
    if (!value.contains(key)) {
      throw SafetensorsError(file, name, std::string("the entry has no \"") + key + "\"");
    }
  }
  for (const auto& item : value.items()) {
    if (item.key() != "dtype" && item.key() != "shape" && item.key() != "data_offsets") {
      throw SafetensorsError(
          file, name,
          "unexpected key '" + item.key() + "' (an entry has exactly dtype, shape, data_offsets)");
    }
  }
  TensorEntry entry;
  entry.name = name;
  entry.dtype = parse_dtype(value["dtype"], file, name);
  entry.shape = parse_shape(value["shape"], file, name);
  std::tie(entry.begin, entry.end) = parse_offsets(value["data_offsets"], file, name);
  check_span_matches_shape(entry, file);
  return entry;
}

// Sorts the tensors by begin and checks that every span lies in the data area and that no two
// non-empty spans overlap (an empty span overlaps nothing, wherever it points).
void check_layout(std::vector<TensorEntry>& tensors, uint64_t data_bytes, const std::string& file) {
  std::sort(tensors.begin(), tensors.end(), [](const TensorEntry& a, const TensorEntry& b) {
    return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
  });
  const TensorEntry* previous = nullptr;  // the non-empty span ending last so far
  for (const TensorEntry& entry : tensors) {
    if (entry.end > data_bytes) {
      throw SafetensorsError(file, entry.name,
                             "data_offsets " + span_text(entry.begin, entry.end) +
                                 " run past the end of the data area, which " + "holds " +
                                 std::to_string(data_bytes) + " bytes");
    }
    if (entry.begin == entry.end) continue;
    if (previous != nullptr && entry.begin < previous->end) {
      throw SafetensorsError(file, entry.name,
                             "data_offsets " + span_text(entry.begin, entry.end) +
                                 " overlap tensor '" + previous->name + "' at " +
                                 span_text(previous->begin, previous->end));
    }
    previous = &entry;
  }
}

uint64_t checked_header_length(const uint8_t* bytes, size_t size, const std::string& file) {
  if (size < 8) {
    throw SafetensorsError(
        file, "",
        "the file is " + std::to_string(size) + " bytes, too short for the 8-byte header length");
  }
  const uint64_t length = read_u64_le(bytes);
  if (length > size - 8) {
    throw SafetensorsError(file, "",
                           "the header length " + std::to_string(length) +
                               " runs past the end of the file (" + std::to_string(size) +
                               " bytes)");
  }
  if (length > kMaxHeaderBytes) {
    throw SafetensorsError(
        file, "", "the header length " + std::to_string(length) + " exceeds the 100 MiB limit");
  }
  return length;
}

}  // namespace

size_t element_size(StDtype dtype) { return info_of(dtype).size; }

const char* dtype_name(StDtype dtype) { return info_of(dtype).name; }

int64_t TensorEntry::numel() const {
  uint64_t count = 1;
  for (int64_t dim : shape) {
    if (dim == 0) return 0;
    count *= static_cast<uint64_t>(dim);  // no overflow for a validated entry
  }
  return static_cast<int64_t>(count);
}

SafetensorsError::SafetensorsError(std::string file, std::string tensor, const std::string& reason)
    : std::runtime_error(error_text(file, tensor, reason)),
      file_(std::move(file)),
      tensor_(std::move(tensor)) {}

Header parse_header(const uint8_t* bytes, size_t size, const std::string& file) {
  const uint64_t length = checked_header_length(bytes, size, file);
  const Json json = parse_json_header(bytes + 8, length, file);
  Header header;
  header.data_start = 8 + length;
  for (const auto& [key, value] : json.items()) {
    if (key == kMetadataKey) {
      header.metadata = parse_metadata(value, file);
    } else {
      header.tensors.push_back(parse_entry(key, value, file));
    }
  }
  check_layout(header.tensors, size - header.data_start, file);
  return header;
}

// ---- SafetensorsFile ----

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error(path + ": cannot open: " + std::strerror(errno));
  struct stat info {};
  if (::fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
    const int error = errno;
    ::close(fd);
    throw std::runtime_error(path + ": not a regular file" +
                             (error ? std::string(": ") + std::strerror(error) : ""));
  }
  size_ = static_cast<size_t>(info.st_size);
  if (size_ > 0) {
    void* mapping = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    const int error = errno;
    ::close(fd);
    if (mapping == MAP_FAILED) {
      throw std::runtime_error(path + ": cannot map: " + std::strerror(error));
    }
    bytes_ = static_cast<const uint8_t*>(mapping);
  } else {
    ::close(fd);
  }
  try {
    static const uint8_t kNoBytes[1] = {0};
    header_ = parse_header(bytes_ ? bytes_ : kNoBytes, size_, path_);
  } catch (...) {
    unmap();
    throw;
  }
  for (size_t i = 0; i < header_.tensors.size(); ++i) index_[header_.tensors[i].name] = i;
}

SafetensorsFile::~SafetensorsFile() { unmap(); }

SafetensorsFile::SafetensorsFile(SafetensorsFile&& other) noexcept
    : path_(std::move(other.path_)),
      bytes_(std::exchange(other.bytes_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      header_(std::move(other.header_)),
      index_(std::move(other.index_)) {}

SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&& other) noexcept {
  if (this != &other) {
    unmap();
    path_ = std::move(other.path_);
    bytes_ = std::exchange(other.bytes_, nullptr);
    size_ = std::exchange(other.size_, 0);
    header_ = std::move(other.header_);
    index_ = std::move(other.index_);
  }
  return *this;
}

void SafetensorsFile::unmap() {
  if (bytes_ != nullptr) ::munmap(const_cast<uint8_t*>(bytes_), size_);
  bytes_ = nullptr;
}

const TensorEntry* SafetensorsFile::find(const std::string& name) const {
  const auto found = index_.find(name);
  return found == index_.end() ? nullptr : &header_.tensors[found->second];
}

void SafetensorsFile::release(const TensorEntry& entry) const {
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const auto first = reinterpret_cast<uintptr_t>(data(entry));
  const uintptr_t begin = (first + page - 1) / page * page;  // whole pages inside the span only
  const uintptr_t end = (first + (entry.end - entry.begin)) / page * page;
  if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

const uint8_t* SafetensorsFile::data(const TensorEntry& entry) const {
  if (bytes_ == nullptr || entry.begin > entry.end || entry.end > size_ - header_.data_start) {
    throw std::out_of_range(error_text(path_, entry.name, "not a span of this file"));
  }
  return bytes_ + header_.data_start + entry.begin;
}

// ---- writing ----

namespace {

// The writer's own checks of what it is given: a readable file must come out.
void check_tensor_to_write(const TensorToWrite& tensor, const std::string& file) {
  auto refuse = [&](const std::string& reason) {
    throw std::invalid_argument(error_text(file, tensor.name, reason));
  };
  if (tensor.name == kMetadataKey) refuse("the name is reserved for the metadata");
  const std::string what = "shape " + shape_text(tensor.shape) + " of " + dtype_name(tensor.dtype);
  for (int64_t dim : tensor.shape) {
    if (dim < 0) refuse(what + " has a negative dimension");
  }
  uint64_t expected = 0;
  if (!checked_byte_size(tensor.dtype, tensor.shape, &expected)) {
    refuse(what + " needs more than 2^64 bytes");
  }
  if (expected != tensor.bytes) {
    refuse(what + " needs " + std::to_string(expected) + " bytes, given " +
           std::to_string(tensor.bytes));
  }
  if (tensor.data == nullptr && tensor.bytes > 0) refuse("no data for its bytes");
}

void write_all(int fd, const void* data, size_t bytes, const std::string& path) {
  const char* next = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t written = ::write(fd, next, bytes);
    if (written < 0 && errno == EINTR) continue;
    if (written <= 0) {
      throw std::runtime_error(path +
                               ": cannot write: " + std::strerror(written < 0 ? errno : EIO));
    }
    next += written;
    bytes -= static_cast<size_t>(written);
  }
}

void sync_directory_of(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "."
                          : slash == 0               ? "/"
                                                     : path.substr(0, slash);
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    ::fsync(fd);  // best effort: makes the rename durable
    ::close(fd);
  }
}

}  // namespace

std::string safetensors_header(const std::vector<TensorToWrite>& tensors,
                               const std::map<std::string, std::string>& metadata,
                               const std::string& file) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header[kMetadataKey] = metadata;
  std::set<std::string> names;
  uint64_t offset = 0;
  for (const TensorToWrite& tensor : tensors) {
    check_tensor_to_write(tensor, file);
    if (!names.insert(tensor.name).second) {
      throw std::invalid_argument(error_text(file, tensor.name, "the name appears twice"));
    }
    header[tensor.name] = {{"dtype", dtype_name(tensor.dtype)},
                           {"shape", tensor.shape},
                           {"data_offsets", {offset, offset + tensor.bytes}}};
    offset += tensor.bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string out;
  out.reserve(8 + text.size());
  append_u64_le(out, text.size());
  return out + text;
}

std::string serialize_safetensors(const std::vector<TensorToWrite>& tensors,
                                  const std::map<std::string, std::string>& metadata) {
  std::string out = safetensors_header(tensors, metadata, "<memory>");
  for (const TensorToWrite& tensor : tensors) {
    out.append(static_cast<const char*>(tensor.data), tensor.bytes);
  }
  return out;
}

void write_file_atomically(const std::string& path,
                           const std::vector<std::pair<const void*, size_t>>& pieces) {
  std::string temporary = path + ".tmp.XXXXXX";
  const int fd = ::mkstemp(temporary.data());
  if (fd < 0) {
    throw std::runtime_error(path +
                             ": cannot create a temporary file beside it: " + std::strerror(errno));
  }
  bool open = true;
  try {
    ::fchmod(fd, 0644);  // mkstemp's 0600 would hide the weights from other users
    for (const auto& [data, bytes] : pieces) write_all(fd, data, bytes, path);
    if (::fsync(fd) != 0) throw std::runtime_error(path + ": fsync: " + std::strerror(errno));
    open = false;
    if (::close(fd) != 0) throw std::runtime_error(path + ": close: " + std::strerror(errno));
    if (::rename(temporary.c_str(), path.c_str()) != 0) {
      throw std::runtime_error(path + ": cannot rename " + temporary +
                               " onto it: " + std::strerror(errno));
    }
  } catch (...) {
    if (open) ::close(fd);
    ::unlink(temporary.c_str());
    throw;
  }
  sync_directory_of(path);
}

void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  const std::string header = safetensors_header(tensors, metadata, path);
  std::vector<std::pair<const void*, size_t>> pieces{{header.data(), header.size()}};
  for (const TensorToWrite& tensor : tensors) pieces.emplace_back(tensor.data, tensor.bytes);
  write_file_atomically(path, pieces);
}

}  // namespace ddpd::hf
