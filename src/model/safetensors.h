// safetensors files, read through mmap with a strict header check.
//
// Format: an 8-byte little-endian header length N, N bytes of JSON
//   {"__metadata__": {...}, "<name>": {"dtype": "BF16", "shape": [..],
//    "data_offsets": [begin, end]}, ...}
// then the data; offsets are relative to the first byte after the header.
// Every check the reference implementation makes is made here, and each
// failure names the file and the tensor: header length within bounds and the
// file, valid JSON of bounded nesting, a supported dtype, shape x dtype size =
// end - begin (without overflow), offsets inside the data, tensors tiling the
// data with no overlap and no hole.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/dtype.h"
#include "common/status.h"
#include "common/tensor_view.h"

namespace vpod::model {

// The largest header we accept (the reference library's limit too).
inline constexpr std::uint64_t kMaxSafetensorsHeaderBytes = 100u << 20;

struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::f32;
  std::vector<std::int64_t> shape;
  std::uint64_t begin = 0;  // byte offsets into the data section
  std::uint64_t end = 0;
  std::int64_t numel() const;
};

// Parses and validates a header. `file_bytes` is the whole file's size and
// `header` the N bytes after the length prefix. Pure (no I/O): the fuzzer and
// the unit tests call it directly.
Result<std::vector<SafetensorsEntry>> parse_safetensors_header(std::string_view header,
                                                               std::uint64_t file_bytes,
                                                               std::string_view file_name);

// Reads the length prefix and validates the header of a whole file image.
Result<std::vector<SafetensorsEntry>> parse_safetensors_image(std::string_view image,
                                                              std::string_view file_name);

// A read-only memory mapping of one file (move-only).
class MappedFile {
 public:
  static Result<MappedFile> open(const std::filesystem::path& path);
  MappedFile() = default;
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::uint8_t* data() const { return data_; }
  std::size_t size() const { return size_; }
  std::string_view view() const { return {reinterpret_cast<const char*>(data_), size_}; }

 private:
  const std::uint8_t* data_ = nullptr;
  std::size_t size_ = 0;
};

// One tensor of a checkpoint: where its bytes are (in a mapping) and which
// file they came from, for error messages.
struct WeightTensor {
  DType dtype = DType::f32;
  std::vector<std::int64_t> shape;
  const void* data = nullptr;
  std::size_t nbytes = 0;
  std::string file;  // file name, for messages
  // A cpu TensorView over the mapped bytes (contiguous).
  TensorView view() const;
};

// All tensors of a model folder: model.safetensors, or the shards listed by
// model.safetensors.index.json (each shard must hold exactly the tensors the
// index assigns to it).
class Checkpoint {
 public:
  static Result<Checkpoint> open(const std::filesystem::path& model_dir);

  const std::map<std::string, WeightTensor>& tensors() const { return tensors_; }
  // Null when absent.
  const WeightTensor* find(const std::string& name) const;
  std::uint64_t total_bytes() const;

 private:
  std::vector<std::unique_ptr<MappedFile>> files_;
  std::map<std::string, WeightTensor> tensors_;
};

// Writes a safetensors file. `tensors` are (name, dtype, shape, bytes) in the
// order they are stored; `fill` produces each tensor's bytes in chunks (so
// multi-GB files are written without holding them in memory).
struct SafetensorsWriteEntry {
  std::string name;
  DType dtype = DType::f32;
  std::vector<std::int64_t> shape;
  std::size_t nbytes() const;
};
// Fills elements [first, first + count) of entry `index` at `dst` (which
// points at element `first`). Called from several threads at once.
using TensorFill = std::function<void(std::size_t index, std::int64_t first, std::int64_t count,
                                      std::uint8_t* dst)>;
// Creates `path` and fills every entry in chunks on `num_threads` threads,
// each chunk into a thread's buffer and written at its offset (memory: one
// chunk per thread, whatever the file's size). The header is padded with spaces to a
// multiple of 8 bytes, as the reference writer does.
Status write_safetensors(const std::filesystem::path& path,
                         const std::vector<SafetensorsWriteEntry>& entries,
                         const std::map<std::string, std::string>& metadata, const TensorFill& fill,
                         int num_threads);

// "BF16" etc.
std::string_view safetensors_dtype_name(DType dtype);

}  // namespace vpod::model
