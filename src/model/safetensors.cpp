// safetensors (safetensors.h): the strict header parser, the mmap'd file, and a
// checkpoint of one or more files opened as named weight views.

#include "model/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <limits>
#include <set>
#include <thread>

#include "common/json_nesting.h"
#include "model/model_config.h"

namespace vpod::model {

namespace {

using nlohmann::json;

// Deepest nesting a valid header needs: {"t": {"shape": [..]}} is 3.
constexpr int kMaxHeaderNesting = 4;
// Elements per tensor, a bound far above any real weight that keeps
// numel * dtype_size well inside 64 bits.
constexpr std::uint64_t kMaxTensorElements = std::uint64_t{1} << 48;

Status corrupt(std::string_view file, std::string_view tensor, const std::string& what) {
  std::string msg(file);
  if (!tensor.empty()) msg += ": tensor '" + std::string(tensor) + "'";
  return data_loss(msg + ": " + what);
}

Result<DType> parse_st_dtype(const std::string& name, std::string_view file,
                             std::string_view tensor) {
  if (name == "F32") return DType::f32;
  if (name == "F16") return DType::f16;
  if (name == "BF16") return DType::bf16;
  static const std::set<std::string> known = {"BOOL", "U8",  "I8",  "I16", "U16",     "I32",
                                              "U32",  "I64", "U64", "F64", "F8_E4M3", "F8_E5M2"};
  if (known.count(name) != 0) {
    return unimplemented(std::string(file) + ": tensor '" + std::string(tensor) + "': dtype '" +
                         name + "' is not supported (F32, F16, BF16)");
  }
  return corrupt(file, tensor, "unknown dtype '" + name + "'");
}

}  // namespace

std::int64_t SafetensorsEntry::numel() const {
  std::int64_t n = 1;
  for (std::int64_t d : shape) n *= d;
  return n;
}

std::string_view safetensors_dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32: return "F32";
    case DType::f16: return "F16";
    case DType::bf16: return "BF16";
  }
  return "?";
}

Result<std::vector<SafetensorsEntry>> parse_safetensors_header(std::string_view header,
                                                               std::uint64_t file_bytes,
                                                               std::string_view file) {
  if (header.size() < 2 || header.size() > kMaxSafetensorsHeaderBytes ||
      file_bytes < 8 + static_cast<std::uint64_t>(header.size())) {
    return corrupt(file, "",
                   "header length " + std::to_string(header.size()) +
                       " is out of bounds for a file of " + std::to_string(file_bytes) + " bytes");
  }
  const std::uint64_t data_bytes = file_bytes - 8 - header.size();
  if (!json_nesting_within(header, kMaxHeaderNesting)) {
    return corrupt(
        file, "",
        "header JSON is nested deeper than " + std::to_string(kMaxHeaderNesting) + " levels");
  }
  const json j = json::parse(header, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return corrupt(file, "", "header is not valid JSON");
  if (!j.is_object()) return corrupt(file, "", "header is not a JSON object");

  std::vector<SafetensorsEntry> entries;
  entries.reserve(j.size());
  for (const auto& [name, value] : j.items()) {
    if (name == "__metadata__") {
      if (!value.is_object()) return corrupt(file, "", "__metadata__ is not an object");
      for (const auto& [k, v] : value.items()) {
        if (!v.is_string())
          return corrupt(file, "", "__metadata__ value '" + k + "' is not a string");
      }
      continue;
    }
    if (!value.is_object()) return corrupt(file, name, "entry is not an object");
    for (const auto& [k, v] : value.items()) {
      (void)v;
      if (k != "dtype" && k != "shape" && k != "data_offsets") {
        return corrupt(file, name, "unexpected field '" + k + "'");
      }
    }
    const auto dtype_it = value.find("dtype");
    const auto shape_it = value.find("shape");
    const auto offsets_it = value.find("data_offsets");
    if (dtype_it == value.end() || !dtype_it->is_string()) {
      return corrupt(file, name, "missing or non-string dtype");
    }
    if (shape_it == value.end() || !shape_it->is_array()) {
      return corrupt(file, name, "missing or non-array shape");
    }
    if (offsets_it == value.end() || !offsets_it->is_array() || offsets_it->size() != 2 ||
        !(*offsets_it)[0].is_number_unsigned() || !(*offsets_it)[1].is_number_unsigned()) {
      return corrupt(file, name, "data_offsets must be two non-negative integers");
    }
    SafetensorsEntry e;
    e.name = name;
    VPOD_ASSIGN_OR_RETURN(e.dtype, parse_st_dtype(dtype_it->get<std::string>(), file, name));
    if (shape_it->size() > static_cast<std::size_t>(TensorView::max_rank)) {
      return corrupt(file, name,
                     "rank " + std::to_string(shape_it->size()) + " exceeds " +
                         std::to_string(TensorView::max_rank));
    }
    std::uint64_t numel = 1;
    for (const json& d : *shape_it) {
      if (!d.is_number_unsigned())
        return corrupt(file, name, "shape holds a non-integer or negative");
      const std::uint64_t dim = d.get<std::uint64_t>();
      if (dim > kMaxTensorElements || (dim != 0 && numel > kMaxTensorElements / dim)) {
        return corrupt(file, name, "shape " + shape_it->dump() + " is too large");
      }
      numel *= dim;
      e.shape.push_back(static_cast<std::int64_t>(dim));
    }
    e.begin = (*offsets_it)[0].get<std::uint64_t>();
    e.end = (*offsets_it)[1].get<std::uint64_t>();
    if (e.begin > e.end) return corrupt(file, name, "data_offsets begin > end");
    if (e.end > data_bytes) {
      return corrupt(file, name,
                     "data_offsets end " + std::to_string(e.end) +
                         " is past the end of the data (" + std::to_string(data_bytes) +
                         " bytes; file truncated?)");
    }
    const std::uint64_t expected = numel * dtype_size(e.dtype);
    if (e.end - e.begin != expected) {
      return corrupt(file, name,
                     "shape " + shape_it->dump() + " x " + std::string(dtype_name(e.dtype)) +
                         " needs " + std::to_string(expected) + " bytes but data_offsets span " +
                         std::to_string(e.end - e.begin));
    }
    entries.push_back(std::move(e));
  }

  // The tensors must tile the data: sorted by offset, each begins where the
  // previous ended, the last ends at the end of the file.
  std::vector<const SafetensorsEntry*> order;
  order.reserve(entries.size());
  for (const auto& e : entries) order.push_back(&e);
  std::sort(order.begin(), order.end(), [](const SafetensorsEntry* a, const SafetensorsEntry* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  std::uint64_t cursor = 0;
  const SafetensorsEntry* previous = nullptr;
  for (const SafetensorsEntry* e : order) {
    if (e->begin < cursor) {
      return corrupt(file, e->name, "data overlaps tensor '" + previous->name + "'");
    }
    if (e->begin > cursor) {
      return corrupt(file, e->name,
                     "data begins at " + std::to_string(e->begin) + " leaving a hole after byte " +
                         std::to_string(cursor));
    }
    cursor = e->end;
    previous = e;
  }
  if (cursor != data_bytes) {
    return corrupt(file, "",
                   std::to_string(data_bytes - cursor) +
                       " bytes after the last tensor are not covered by the header");
  }
  return entries;
}

Result<std::vector<SafetensorsEntry>> parse_safetensors_image(std::string_view image,
                                                              std::string_view file) {
  if (image.size() < 8) {
    return corrupt(
        file, "",
        "file of " + std::to_string(image.size()) + " bytes is too short for a header length");
  }
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<std::uint8_t>(image[i]);
  if (n > kMaxSafetensorsHeaderBytes || n > image.size() - 8) {
    return corrupt(file, "",
                   "header length " + std::to_string(n) + " is out of bounds (file " +
                       std::to_string(image.size()) + " bytes, limit " +
                       std::to_string(kMaxSafetensorsHeaderBytes) + ")");
  }
  return parse_safetensors_header(image.substr(8, n), image.size(), file);
}

Result<MappedFile> MappedFile::open(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return not_found(path.string() + ": cannot open (" + std::strerror(errno) + ")");
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return internal_error(path.string() + ": fstat failed (" + std::strerror(err) + ")");
  }
  MappedFile file;
  file.size_ = static_cast<std::size_t>(st.st_size);
  if (file.size_ == 0) {
    ::close(fd);
    return data_loss(path.string() + ": file is empty");
  }
  void* p = ::mmap(nullptr, file.size_, PROT_READ, MAP_PRIVATE, fd, 0);
  const int err = errno;
  ::close(fd);
  if (p == MAP_FAILED) {
    return internal_error(path.string() + ": mmap failed (" + std::strerror(err) + ")");
  }
  file.data_ = static_cast<const std::uint8_t*>(p);
  return file;
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<std::uint8_t*>(data_), size_);
}

MappedFile::MappedFile(MappedFile&& other) noexcept : data_(other.data_), size_(other.size_) {
  other.data_ = nullptr;
  other.size_ = 0;
}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) ::munmap(const_cast<std::uint8_t*>(data_), size_);
    data_ = other.data_;
    size_ = other.size_;
    other.data_ = nullptr;
    other.size_ = 0;
  }
  return *this;
}

TensorView WeightTensor::view() const {
  // TensorView takes an initializer list; build the rank we have.
  void* p = const_cast<void*>(data);
  const auto& s = shape;
  switch (s.size()) {
    case 0: return TensorView(p, dtype, {1});
    case 1: return TensorView(p, dtype, {s[0]});
    case 2: return TensorView(p, dtype, {s[0], s[1]});
    case 3: return TensorView(p, dtype, {s[0], s[1], s[2]});
    default: break;
  }
  std::int64_t n = 1;
  for (auto d : s) n *= d;
  return TensorView(p, dtype, {n});
}

const WeightTensor* Checkpoint::find(const std::string& name) const {
  const auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

std::uint64_t Checkpoint::total_bytes() const {
  std::uint64_t n = 0;
  for (const auto& [name, t] : tensors_) n += t.nbytes;
  return n;
}

Result<Checkpoint> Checkpoint::open(const std::filesystem::path& dir) {
  Checkpoint ckpt;
  // Opens one file and adds its tensors; `expected` (for shards) is the set
  // of names the index assigns to it.
  auto add_file = [&](const std::string& file_name,
                      const std::set<std::string>* expected) -> Status {
    const auto path = dir / file_name;
    VPOD_ASSIGN_OR_RETURN(MappedFile mapped, MappedFile::open(path));
    auto owned = std::make_unique<MappedFile>(std::move(mapped));
    VPOD_ASSIGN_OR_RETURN(auto entries, parse_safetensors_image(owned->view(), path.string()));
    // parse_safetensors_image validated the length prefix.
    std::uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | owned->data()[i];
    const std::uint8_t* data_start = owned->data() + 8 + n;
    for (auto& e : entries) {
      if (expected != nullptr && expected->count(e.name) == 0) {
        return data_loss(path.string() + ": tensor '" + e.name +
                         "' is not assigned to this file by model.safetensors.index.json");
      }
      if (ckpt.tensors_.count(e.name) != 0) {
        return data_loss(path.string() + ": tensor '" + e.name + "' also appears in " +
                         ckpt.tensors_[e.name].file);
      }
      WeightTensor t;
      t.dtype = e.dtype;
      t.shape = e.shape;
      t.data = data_start + e.begin;
      t.nbytes = e.end - e.begin;
      t.file = file_name;
      ckpt.tensors_.emplace(e.name, std::move(t));
    }
    if (expected != nullptr) {
      for (const auto& name : *expected) {
        if (ckpt.tensors_.count(name) == 0) {
          return data_loss(path.string() + ": tensor '" + name +
                           "' is listed for this file in model.safetensors.index.json but "
                           "missing from it");
        }
      }
    }
    ckpt.files_.push_back(std::move(owned));
    return {};
  };

  const auto index_path = dir / "model.safetensors.index.json";
  if (std::filesystem::exists(index_path)) {
    VPOD_ASSIGN_OR_RETURN(std::string text, read_text_file(index_path));
    const json j = json::parse(text, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("weight_map") ||
        !j["weight_map"].is_object()) {
      return data_loss(index_path.string() + ": not a JSON object with a 'weight_map' object");
    }
    std::map<std::string, std::set<std::string>> by_file;
    for (const auto& [name, file] : j["weight_map"].items()) {
      if (!file.is_string()) {
        return data_loss(index_path.string() + ": tensor '" + name + "': file is not a string");
      }
      const std::string f = file.get<std::string>();
      if (f.empty() || f.find('/') != std::string::npos || f.find('\\') != std::string::npos ||
          f == "." || f == "..") {
        return data_loss(index_path.string() + ": tensor '" + name + "': shard name '" + f +
                         "' is not a plain file name");
      }
      by_file[f].insert(name);
    }
    if (by_file.empty()) return data_loss(index_path.string() + ": weight_map is empty");
    for (const auto& [file, names] : by_file) VPOD_RETURN_IF_ERROR(add_file(file, &names));
    return ckpt;
  }
  const auto single = dir / "model.safetensors";
  if (!std::filesystem::exists(single)) {
    return not_found(dir.string() +
                     ": no model.safetensors or model.safetensors.index.json in this folder");
  }
  VPOD_RETURN_IF_ERROR(add_file("model.safetensors", nullptr));
  return ckpt;
}

std::size_t SafetensorsWriteEntry::nbytes() const {
  std::size_t n = dtype_size(dtype);
  for (auto d : shape) n *= static_cast<std::size_t>(d);
  return n;
}

Status write_safetensors(const std::filesystem::path& path,
                         const std::vector<SafetensorsWriteEntry>& entries,
                         const std::map<std::string, std::string>& metadata, const TensorFill& fill,
                         int num_threads) {
  // nlohmann's object is ordered by name; the data order is ours, so the
  // offsets are computed in `entries` order.
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<std::uint64_t> offsets(entries.size());
  std::uint64_t cursor = 0;
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const auto& e = entries[i];
    offsets[i] = cursor;
    header[e.name] = {{"dtype", std::string(safetensors_dtype_name(e.dtype))},
                      {"shape", e.shape},
                      {"data_offsets", {cursor, cursor + e.nbytes()}}};
    cursor += e.nbytes();
  }
  std::string text = header.dump();
  while (text.size() % 8 != 0) text.push_back(' ');
  const std::uint64_t total = 8 + text.size() + cursor;

  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return not_found(path.string() + ": cannot create (" + std::strerror(errno) + ")");
  // Writes `bytes` at `offset` (pwrite may write less than asked).
  auto write_at = [fd](const std::uint8_t* src, std::size_t bytes, std::uint64_t offset) {
    while (bytes > 0) {
      const ssize_t n = ::pwrite(fd, src, bytes, static_cast<off_t>(offset));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      src += n;
      bytes -= static_cast<std::size_t>(n);
      offset += static_cast<std::uint64_t>(n);
    }
    return true;
  };
  std::vector<std::uint8_t> head(8 + text.size());
  const std::uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) head[i] = static_cast<std::uint8_t>(n >> (8 * i));
  std::memcpy(head.data() + 8, text.data(), text.size());
  if (!write_at(head.data(), head.size(), 0)) {
    const int err = errno;
    ::close(fd);
    return resource_exhausted(path.string() + ": cannot write (" + std::strerror(err) + ")");
  }
  const std::uint64_t data_offset = head.size();

  // Work items: chunks of at most kChunkElements of one tensor, each filled
  // into its thread's buffer and written at its offset: memory use is one
  // chunk per thread, whatever the model's size (a 70B model is 141 GB).
  constexpr std::int64_t kChunkElements = std::int64_t{1} << 22;
  struct Chunk {
    std::size_t index;
    std::int64_t first, count;
  };
  std::vector<Chunk> chunks;
  for (std::size_t i = 0; i < entries.size(); ++i) {
    std::int64_t numel = 1;
    for (auto d : entries[i].shape) numel *= d;
    for (std::int64_t first = 0; first < numel; first += kChunkElements) {
      chunks.push_back({i, first, std::min(kChunkElements, numel - first)});
    }
  }
  std::atomic<std::size_t> next{0};
  std::atomic<int> write_errno{0};
  auto worker = [&] {
    std::vector<std::uint8_t> buffer;
    for (std::size_t c = next++; c < chunks.size() && write_errno == 0; c = next++) {
      const Chunk& ch = chunks[c];
      const std::size_t elem = dtype_size(entries[ch.index].dtype);
      buffer.resize(static_cast<std::size_t>(ch.count) * elem);
      fill(ch.index, ch.first, ch.count, buffer.data());
      if (!write_at(
              buffer.data(), buffer.size(),
              data_offset + offsets[ch.index] + static_cast<std::uint64_t>(ch.first) * elem)) {
        write_errno = errno != 0 ? errno : EIO;
      }
    }
  };
  std::vector<std::thread> threads;
  for (int t = 1; t < std::max(1, num_threads); ++t) threads.emplace_back(worker);
  worker();
  for (auto& t : threads) t.join();
  const int close_rc = ::close(fd);
  if (write_errno != 0 || close_rc != 0) {
    const int err = write_errno != 0 ? write_errno.load() : errno;
    return resource_exhausted(path.string() + ": cannot write " + std::to_string(total) +
                              " bytes (" + std::strerror(err) + ")");
  }
  return {};
}

}  // namespace vpod::model
