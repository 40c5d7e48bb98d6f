// A random-weight model (vpod make-model, no tokenizer) written into a fresh
// temporary folder for one test and removed with it, also when the test
// stops early on a failed ASSERT.
#pragma once

#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <string>
#include <system_error>

#include "model/make_model.h"

namespace vpod::model::testing {

class TempModelDir {
 public:
  TempModelDir(const std::string& preset, std::uint64_t seed) {
    static std::atomic<int> counter{0};
    path_ = std::filesystem::temp_directory_path() /
            ("vpod_" + preset + "_" + std::to_string(::getpid()) + "_" +
             std::to_string(counter.fetch_add(1)));
    MakeModelOptions o;
    o.out_dir = path_;
    o.preset = preset;
    o.seed = seed;
    o.with_tokenizer = false;
    status_ = make_model(o).status();
  }
  ~TempModelDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempModelDir(const TempModelDir&) = delete;
  TempModelDir& operator=(const TempModelDir&) = delete;

  // make_model's result: check it before loading.
  const Status& status() const { return status_; }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  Status status_;
};

}  // namespace vpod::model::testing
