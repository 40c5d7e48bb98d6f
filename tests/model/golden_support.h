// The golden-logit scenario shared by the CPU test (golden_test.cpp) and the
// CUDA test (cuda_backend_gpu_test.cpp): tiny presets written by make-model
// with the goldens' seeds, compared with transformers' logits for a one-shot
// prefill and for chunked prefill + decodes in a hybrid batch.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "kv_buffers.h"
#include "model/make_model.h"
#include "model/model.h"

namespace vpod::model::testing {

namespace fs = std::filesystem;
using json = nlohmann::json;

inline const fs::path kDataDir = fs::path(VPOD_TESTS_DIR) / "model" / "data";

inline json load_goldens() {
  std::ifstream in(kDataDir / "goldens.json");
  EXPECT_TRUE(in.good()) << "missing " << (kDataDir / "goldens.json");
  return json::parse(in);
}

// FNV-1a of every 4096th byte (see make_goldens.py's fingerprint()).
inline std::string fingerprint(const fs::path& path, std::uint64_t* size) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  *size = data.size();
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (std::size_t i = 0; i < data.size(); i += 4096) {
    h ^= static_cast<std::uint8_t>(data[i]);
    h *= 0x100000001b3ull;
  }
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

inline fs::path make_case_model(const json& c) {
  const fs::path dir =
      fs::temp_directory_path() /
      ("vpod_golden_" + c["preset"].get<std::string>() + "_" + std::to_string(::getpid()));
  MakeModelOptions options;
  options.out_dir = dir;
  options.preset = c["preset"];
  options.seed = c["seed"];
  options.dtype = *parse_dtype(c["dtype"].get<std::string>());
  options.with_tokenizer = false;
  options.num_threads = 2;
  auto written = make_model(options);
  EXPECT_TRUE(written.ok()) << written.status().to_string();
  return dir;
}

// Compares `row` (fp32 logits of one position) with the golden position.
inline void expect_position(const float* row, const json& golden, const std::string& what,
                            float tolerance) {
  const auto& ids = golden["ids"];
  const auto& values = golden["logits"];
  float max_diff = 0.0f;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    max_diff = std::max(max_diff, std::fabs(row[ids[i].get<int>()] - values[i].get<float>()));
  }
  EXPECT_LT(max_diff, tolerance) << what;
}

inline int argmax(const float* row, int n) {
  return static_cast<int>(std::max_element(row, row + n) - row);
}

inline std::vector<float> download(Backend& backend, const TensorView& logits) {
  std::vector<float> host(static_cast<std::size_t>(logits.numel()));
  EXPECT_TRUE(backend.download(logits.data(), host.size() * sizeof(float), host.data()).ok());
  return host;
}

// Runs the scenario of goldens case `c` on `backend` (KV cache in the
// backend's compute dtype), comparing logits within `tolerance`.
inline void run_golden_case(const json& c, Backend& backend, float tolerance) {
  const fs::path dir = make_case_model(c);

  // Same seed, same bytes: the fingerprint recorded when the goldens were made.
  std::uint64_t size = 0;
  EXPECT_EQ(fingerprint(dir / "model.safetensors", &size),
            c["weights"]["fnv1a64_stride4096"].get<std::string>());
  EXPECT_EQ(size, c["weights"]["size"].get<std::uint64_t>());

  const std::vector<int> ids = c["token_ids"];
  const int n = static_cast<int>(ids.size());
  ModelOptions options;
  options.max_num_tokens = 64;
  options.max_num_sequences = 4;
  options.max_logit_rows = 64;
  auto model = Model::load(dir, backend, options);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  const int vocab = (*model)->config().vocab_size;
  ASSERT_EQ(vocab, c["vocab_size"].get<int>());
  auto kv = KvCacheBuffers::create(backend, (*model)->config(), backend.compute_dtype(), 3, 32);
  ASSERT_TRUE(kv.ok());
  StepPlan plan;

  // 1. One-shot prefill, logits of every position.
  {
    HybridBatch batch;
    batch.prefills.push_back({.slot = 0, .cached_len = 0, .num_new = n, .token_offset = 0});
    batch.token_ids.assign(ids.begin(), ids.end());
    for (int i = 0; i < n; ++i) batch.positions.push_back(i);
    auto logits = (*model)->forward(batch, kv->view(), plan, LogitsMode::all_tokens);
    ASSERT_TRUE(logits.ok()) << logits.status().to_string();
    const std::vector<float> all = download(backend, *logits);
    for (int t = 0; t < n; ++t) {
      const float* row = all.data() + static_cast<std::int64_t>(t) * vocab;
      expect_position(row, c["positions"][t], "one-shot position " + std::to_string(t), tolerance);
      EXPECT_EQ(argmax(row, vocab), c["positions"][t]["argmax"].get<int>()) << "position " << t;
    }
  }

  // 2. The same prompt in slot 2 as a chunk of 5, then a chunk of 3 batched
  //    with a decode of slot 0 (whose cache holds the prompt), then decodes.
  //    Each position's last-token logits must match the goldens.
  {
    const int chunk1 = 5, chunk2 = 3;
    HybridBatch b1;
    b1.prefills.push_back({.slot = 2, .cached_len = 0, .num_new = chunk1, .token_offset = 0});
    for (int i = 0; i < chunk1; ++i) {
      b1.token_ids.push_back(ids[i]);
      b1.positions.push_back(i);
    }
    auto l1 = (*model)->forward(b1, kv->view(), plan);
    ASSERT_TRUE(l1.ok()) << l1.status().to_string();
    expect_position(download(backend, *l1).data(), c["positions"][chunk1 - 1], "chunk 1",
                    tolerance);

    // Slot 0 decodes token ids[n-1] again at position n-1... its cache holds
    // [0, n) from step 1; rewriting row n-1 with the same token is idempotent,
    // so its logits are golden position n-1.
    HybridBatch b2;
    b2.prefills.push_back({.slot = 2, .cached_len = chunk1, .num_new = chunk2, .token_offset = 0});
    for (int i = chunk1; i < chunk1 + chunk2; ++i) {
      b2.token_ids.push_back(ids[i]);
      b2.positions.push_back(i);
    }
    b2.decodes.push_back({.slot = 0, .cached_len = n - 1, .num_new = 1, .token_offset = chunk2});
    b2.token_ids.push_back(ids[n - 1]);
    b2.positions.push_back(n - 1);
    auto l2 = (*model)->forward(b2, kv->view(), plan);
    ASSERT_TRUE(l2.ok()) << l2.status().to_string();
    const std::vector<float> rows_v = download(backend, *l2);
    const float* rows = rows_v.data();
    expect_position(rows, c["positions"][chunk1 + chunk2 - 1], "chunk 2", tolerance);
    expect_position(rows + vocab, c["positions"][n - 1], "decode in hybrid batch", tolerance);

    for (int i = chunk1 + chunk2; i < n; ++i) {
      HybridBatch d;
      d.decodes.push_back({.slot = 2, .cached_len = i, .num_new = 1, .token_offset = 0});
      d.token_ids.push_back(ids[i]);
      d.positions.push_back(i);
      auto l = (*model)->forward(d, kv->view(), plan);
      ASSERT_TRUE(l.ok()) << l.status().to_string();
      expect_position(download(backend, *l).data(), c["positions"][i],
                      "decode at position " + std::to_string(i), tolerance);
    }
  }
  fs::remove_all(dir);
}

}  // namespace vpod::model::testing
