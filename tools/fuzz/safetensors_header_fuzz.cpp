// libFuzzer target: the safetensors header parser (src/model/safetensors.h)
// on arbitrary file images. Any input must give either entries that satisfy
// the format's invariants or an error Status; never a crash, hang or
// out-of-bounds read (run under ASan: cmake -DVPOD_FUZZ=ON with clang).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "common/check.h"
#include "model/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view image(reinterpret_cast<const char*>(data), size);
  auto entries = vpod::model::parse_safetensors_image(image, "fuzz.safetensors");
  if (!entries.ok()) return 0;
  // Accepted: every tensor lies inside the file and the sizes agree.
  std::uint64_t covered = 0;
  for (const auto& e : *entries) {
    VPOD_CHECK(e.begin <= e.end && e.end <= size);
    VPOD_CHECK(static_cast<std::uint64_t>(e.numel()) * vpod::dtype_size(e.dtype) ==
               e.end - e.begin);
    covered += e.end - e.begin;
  }
  VPOD_CHECK(covered <= size);
  return 0;
}
