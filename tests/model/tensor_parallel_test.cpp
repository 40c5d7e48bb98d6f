// Tensor parallelism on the CPU backend: a tiny random model split over 2
// ranks (threads with the in-process communicator) gives the logits of the
// whole model within fp32 round-off and the same greedy tokens, for a shape
// whose KV heads divide among the ranks and one whose single KV head is
// replicated; the shard layout's checks and the communicator's collectives.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <optional>
#include <random>
#include <thread>
#include <vector>

#include "kv_buffers.h"
#include "model/communicator.h"
#include "model/make_model.h"
#include "model/model.h"
#include "model/tensor_parallel.h"
#include "temp_model_dir.h"

namespace vpod::model {
namespace {

// Runs fn(rank) for every rank at once, one thread each (as the engine's
// rank threads do); returns the first failure.
Status on_ranks(int n, const std::function<Status(int)>& fn) {
  std::vector<Status> results(n);
  std::vector<std::thread> threads;
  for (int r = 1; r < n; ++r) threads.emplace_back([&, r] { results[r] = fn(r); });
  results[0] = fn(0);
  for (auto& t : threads) t.join();
  for (const Status& s : results) {
    if (!s.ok()) return s;
  }
  return {};
}

// A model split over `n` ranks (n = 1: the whole model), each with its own
// CPU backend, shard, plan and KV cache of its KV heads.
class Group {
 public:
  static Result<std::unique_ptr<Group>> load(const std::filesystem::path& dir, int n,
                                             LoadFormat format = LoadFormat::safetensors,
                                             std::uint64_t dummy_seed = 0) {
    auto g = std::make_unique<Group>();
    g->ranks_.resize(n);
    if (n > 1) g->comms_ = make_local_communicators(n);
    VPOD_RETURN_IF_ERROR(on_ranks(n, [&](int r) -> Status {
      Rank& rank = g->ranks_[r];
      rank.backend = make_cpu_backend(1);
      ModelOptions o{.max_num_tokens = 64, .max_num_sequences = 8, .max_logit_rows = 64};
      o.tensor_parallel = {.rank = r, .size = n, .comm = n > 1 ? g->comms_[r].get() : nullptr};
      o.load_format = format;
      o.dummy_seed = dummy_seed;
      VPOD_ASSIGN_OR_RETURN(rank.model, Model::load(dir, *rank.backend, o));
      VPOD_ASSIGN_OR_RETURN(KvCacheBuffers kv,
                            KvCacheBuffers::create(*rank.backend, rank.model->shard_config(),
                                                   rank.model->kv_dtype(), 4, 64));
      rank.kv.emplace(std::move(kv));
      return {};
    }));
    return g;
  }

  Model& model(int rank) { return *ranks_[rank].model; }
  void set_fused_decode(bool fuse) {
    for (Rank& r : ranks_) {
      DecodeTuning t = r.backend->decode_tuning();
      t.fuse = fuse;
      r.backend->set_decode_tuning(t);
    }
  }

  // One step on every rank; rank 0's logits [rows, vocab], copied.
  Result<std::vector<float>> forward(const HybridBatch& batch, LogitsMode mode) {
    std::vector<float> logits;
    VPOD_RETURN_IF_ERROR(on_ranks(static_cast<int>(ranks_.size()), [&](int r) -> Status {
      Rank& rank = ranks_[r];
      VPOD_ASSIGN_OR_RETURN(TensorView out,
                            rank.model->forward(batch, rank.kv->view(), rank.plan, mode));
      if (r == 0) {
        const auto* p = static_cast<const float*>(out.data());
        logits.assign(p, p + out.numel());
      }
      return {};
    }));
    return logits;
  }

 private:
  struct Rank {
    std::unique_ptr<Backend> backend;
    std::unique_ptr<Model> model;
    std::optional<KvCacheBuffers> kv;
    StepPlan plan;
  };
  std::vector<std::unique_ptr<Communicator>> comms_;
  std::vector<Rank> ranks_;
};

int argmax(const float* row, int vocab) {
  return static_cast<int>(std::max_element(row, row + vocab) - row);
}

// A scripted run: 3 prompts prefilled (one in two chunks, with every token's
// logits), then `decode_steps` greedy decode steps of all three. Returns
// every step's logits and the greedy tokens.
struct ScriptedRun {
  std::vector<std::vector<float>> logits;
  std::vector<int> tokens;
};
ScriptedRun scripted_run(Group& g, int vocab, int decode_steps) {
  ScriptedRun run;
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> tok(0, vocab - 1);
  auto keep = [&](const HybridBatch& b, LogitsMode mode) {
    auto out = g.forward(b, mode);
    EXPECT_TRUE(out.ok()) << out.status().to_string();
    if (out.ok()) run.logits.push_back(std::move(*out));
  };
  const int lens[] = {11, 4, 19};
  // Step 1: prompts 0 and 1 whole, the first 8 tokens of prompt 2.
  HybridBatch first;
  int offset = 0;
  for (int slot = 0; slot < 3; ++slot) {
    const int n = slot == 2 ? 8 : lens[slot];
    first.prefills.push_back({.slot = slot, .cached_len = 0, .num_new = n, .token_offset = offset});
    for (int i = 0; i < n; ++i) {
      first.token_ids.push_back(tok(rng));
      first.positions.push_back(i);
    }
    offset += n;
  }
  keep(first, LogitsMode::all_tokens);
  // Step 2: the rest of prompt 2.
  HybridBatch second;
  second.prefills.push_back({.slot = 2, .cached_len = 8, .num_new = 11, .token_offset = 0});
  for (int i = 8; i < lens[2]; ++i) {
    second.token_ids.push_back(tok(rng));
    second.positions.push_back(i);
  }
  keep(second, LogitsMode::last_per_sequence);
  // The first greedy token of each sequence.
  int context[] = {lens[0], lens[1], lens[2]};
  std::vector<int> next(3);
  if (run.logits.size() == 2) {
    const std::vector<float>& a = run.logits[0];
    next[0] = argmax(a.data() + (lens[0] - 1) * vocab, vocab);
    next[1] = argmax(a.data() + (lens[0] + lens[1] - 1) * vocab, vocab);
    next[2] = argmax(run.logits[1].data(), vocab);
  }
  for (int step = 0; step < decode_steps; ++step) {
    HybridBatch d;
    for (int slot = 0; slot < 3; ++slot) {
      d.decodes.push_back(
          {.slot = slot, .cached_len = context[slot], .num_new = 1, .token_offset = slot});
      d.token_ids.push_back(next[slot]);
      d.positions.push_back(context[slot]);
      run.tokens.push_back(next[slot]);
      ++context[slot];
    }
    auto out = g.forward(d, LogitsMode::last_per_sequence);
    EXPECT_TRUE(out.ok()) << out.status().to_string();
    if (!out.ok()) break;
    for (int slot = 0; slot < 3; ++slot) next[slot] = argmax(out->data() + slot * vocab, vocab);
    run.logits.push_back(std::move(*out));
  }
  return run;
}

// Tolerance. The shards compute the same products; what differs is the
// order of fp32 additions: o_proj and down_proj sum their K inputs as two
// partial sums of K/2 added by the all-reduce (the embedding and the LM head
// are exact copies). That reassociation changes a dot product by a few ulps
// of its magnitude, which later layers carry on: measured 3.6e-7 on logits
// of magnitude 0.8-1.1 (all three presets). 1e-5 of the largest logit leaves
// a 30x margin for other compilers' vectorization, while a wrong slice (a
// head, a column block, a vocab offset) moves logits by O(0.1).
constexpr float kRelativeTolerance = 1e-5f;

void expect_close(const ScriptedRun& tp, const ScriptedRun& whole, const char* preset) {
  ASSERT_EQ(tp.logits.size(), whole.logits.size()) << preset;
  float scale = 0.0f;
  for (const auto& step : whole.logits) {
    for (float v : step) scale = std::max(scale, std::fabs(v));
  }
  ASSERT_GT(scale, 0.0f);
  float worst = 0.0f;
  for (std::size_t s = 0; s < whole.logits.size(); ++s) {
    ASSERT_EQ(tp.logits[s].size(), whole.logits[s].size()) << preset << " step " << s;
    for (std::size_t i = 0; i < whole.logits[s].size(); ++i) {
      worst = std::max(worst, std::fabs(tp.logits[s][i] - whole.logits[s][i]));
    }
  }
  EXPECT_LE(worst, kRelativeTolerance * scale) << preset << ": max |logit| " << scale;
  std::printf("%s: max |logit difference| %.3g of max |logit| %.3g\n", preset, worst, scale);
  EXPECT_EQ(tp.tokens, whole.tokens) << preset;
}

// tiny: 4 q heads, 2 KV heads (one per rank); tiny-qwen2: q/k/v bias, tied
// embeddings (the vocab-parallel head is the embedding's slice); tiny-qwen3:
// 1 KV head (replicated on both ranks), q/k norm, head_dim 32.
TEST(TensorParallel, TwoRanksGiveTheWholeModelsLogitsAndTokens) {
  for (const char* preset : {"tiny", "tiny-qwen2", "tiny-qwen3"}) {
    const testing::TempModelDir dir(preset, 21);
    ASSERT_TRUE(dir.status().ok()) << dir.status().to_string();
    auto whole = Group::load(dir.path(), 1);
    ASSERT_TRUE(whole.ok()) << whole.status().to_string();
    auto split = Group::load(dir.path(), 2);
    ASSERT_TRUE(split.ok()) << split.status().to_string();
    const ModelConfig& c = (*whole)->model(0).config();
    const ModelConfig& s0 = (*split)->model(0).shard_config();
    EXPECT_EQ(s0.num_q_heads, c.num_q_heads / 2);
    EXPECT_EQ(s0.num_kv_heads, std::max(1, c.num_kv_heads / 2));
    EXPECT_EQ(s0.vocab_size, c.vocab_size / 2);
    EXPECT_LT((*split)->model(1).weight_bytes(), (*whole)->model(0).weight_bytes());

    const ScriptedRun reference = scripted_run(**whole, c.vocab_size, 12);
    const ScriptedRun tp = scripted_run(**split, c.vocab_size, 12);
    expect_close(tp, reference, preset);
  }
}

// --load-format dummy makes make-model's weights for the seed in memory: the
// whole model's logits equal the written checkpoint's bit for bit, and each
// shard generates just its slices (rows and, for o/down, column blocks).
TEST(TensorParallel, DummyWeightsAreMakeModelsWeightsOnEveryShard) {
  for (const char* preset : {"tiny", "tiny-qwen2", "tiny-qwen3"}) {
    const testing::TempModelDir dir(preset, 21);
    ASSERT_TRUE(dir.status().ok()) << dir.status().to_string();
    auto written = Group::load(dir.path(), 1);
    auto dummy = Group::load(dir.path(), 1, LoadFormat::dummy, 21);
    auto dummy_split = Group::load(dir.path(), 2, LoadFormat::dummy, 21);
    auto other_seed = Group::load(dir.path(), 1, LoadFormat::dummy, 22);
    ASSERT_TRUE(written.ok() && dummy.ok() && dummy_split.ok() && other_seed.ok());
    const int vocab = (*written)->model(0).config().vocab_size;
    const ScriptedRun reference = scripted_run(**written, vocab, 6);
    const ScriptedRun same = scripted_run(**dummy, vocab, 6);
    EXPECT_EQ(same.logits, reference.logits) << preset;
    expect_close(scripted_run(**dummy_split, vocab, 6), reference, preset);
    EXPECT_NE(scripted_run(**other_seed, vocab, 6).logits, reference.logits) << preset;
  }
}

// A folder without weights loads only with --load-format dummy, and says so.
TEST(TensorParallel, NoWeightsFolderNamesTheDummyFormat) {
  const testing::TempModelDir dir("tiny", 3);
  ASSERT_TRUE(dir.status().ok());
  std::filesystem::remove(dir.path() / "model.safetensors");
  auto backend = make_cpu_backend(1);
  auto refused = Model::load(dir.path(), *backend, {.max_num_tokens = 16, .max_num_sequences = 2});
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("--load-format dummy"), std::string::npos)
      << refused.status().to_string();
  auto dummy = Model::load(dir.path(), *backend,
                           {.max_num_tokens = 16,
                            .max_num_sequences = 2,
                            .load_format = LoadFormat::dummy,
                            .dummy_seed = 3});
  EXPECT_TRUE(dummy.ok()) << dummy.status().to_string();
}

// The decode fusions' orchestration (norms inside the GEMMs, alternating
// residual buffers) with the row-parallel all-reduces in between.
TEST(TensorParallel, FusedDecodeStepsMatchToo) {
  const testing::TempModelDir dir("tiny", 4);
  ASSERT_TRUE(dir.status().ok()) << dir.status().to_string();
  auto whole = Group::load(dir.path(), 1);
  auto split = Group::load(dir.path(), 2);
  ASSERT_TRUE(whole.ok() && split.ok());
  (*whole)->set_fused_decode(true);
  (*split)->set_fused_decode(true);
  const int vocab = (*whole)->model(0).config().vocab_size;
  expect_close(scripted_run(**split, vocab, 8), scripted_run(**whole, vocab, 8), "tiny fused");
}

TEST(TensorParallel, LayoutsReplicateKvHeadsAndRefuseWhatDoesNotDivide) {
  ModelConfig c;
  c.num_q_heads = 64;
  c.num_kv_heads = 8;
  c.intermediate_size = 28672;
  c.vocab_size = 128256;
  c.head_dim = 128;
  auto s = shard_layout(c, 8, 5);
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_EQ(s->num_q_heads, 8);
  EXPECT_EQ(s->num_kv_heads, 1);
  EXPECT_EQ(s->first_kv_head, 5);
  EXPECT_EQ(s->first_intermediate(), 5 * 3584);
  EXPECT_EQ(s->first_vocab(), 5 * 16032);

  // 4 KV heads over 8 ranks: ranks 2r and 2r + 1 share KV head r, whose
  // query heads they hold.
  c.num_kv_heads = 4;
  for (int r = 0; r < 8; ++r) {
    auto l = shard_layout(c, 8, r);
    ASSERT_TRUE(l.ok());
    EXPECT_EQ(l->num_kv_heads, 1);
    EXPECT_EQ(l->first_kv_head, r / 2);
    EXPECT_EQ(l->first_q_head() / (c.num_q_heads / c.num_kv_heads), r / 2);
  }

  auto refused = [&](const ModelConfig& config, int size, const std::string& text) {
    auto l = shard_layout(config, size, 0);
    ASSERT_FALSE(l.ok()) << size;
    EXPECT_EQ(l.status().code(), StatusCode::invalid_argument);
    EXPECT_NE(l.status().message().find(text), std::string::npos) << l.status().to_string();
  };
  c.num_kv_heads = 8;
  refused(c, 3, "attention heads (64) is not divisible by 3");
  refused(c, 0, "--tensor-parallel-size must be >= 1, got 0");
  ModelConfig odd_inter = c;
  odd_inter.intermediate_size = 1000;
  refused(odd_inter, 16, "intermediate size (1000) is not divisible by 16");
  ModelConfig odd_vocab = c;
  odd_vocab.vocab_size = 32001;
  refused(odd_vocab, 2, "vocabulary size (32001) is not divisible by 2");
  ModelConfig six_kv = c;
  six_kv.num_q_heads = 48;
  six_kv.num_kv_heads = 6;
  refused(six_kv, 4, "KV heads (6) is not divisible by 4");
  ModelConfig three_kv = c;
  three_kv.num_q_heads = 48;
  three_kv.num_kv_heads = 3;
  refused(three_kv, 8, "3 KV heads can be replicated only when the size is a multiple of them");
}

// The 70B preset (written for tensor parallelism; too large to write in CI)
// has Llama-3-70B's shapes and splits over 2, 4 and 8 GPUs.
TEST(TensorParallel, Llama3_70bPresetHasItsShapesAndSplits) {
  auto preset = find_preset("llama3-70b");
  ASSERT_TRUE(preset.ok()) << preset.status().to_string();
  const ModelConfig& c = preset->config;
  EXPECT_EQ(c.num_layers, 80);
  EXPECT_EQ(c.hidden_size, 8192);
  EXPECT_EQ(c.num_q_heads, 64);
  EXPECT_EQ(c.num_kv_heads, 8);
  EXPECT_EQ(c.intermediate_size, 28672);
  EXPECT_EQ(c.vocab_size, 128256);
  EXPECT_EQ(c.rope.theta, 500000.0);
  EXPECT_NEAR(static_cast<double>(c.num_parameters()), 70.55e9, 0.05e9);
  for (int size : {2, 4, 8}) {
    auto s = shard_layout(c, size, size - 1);
    ASSERT_TRUE(s.ok()) << size << ": " << s.status().to_string();
    EXPECT_EQ(s->num_kv_heads, 8 / size);
  }
}

TEST(TensorParallel, ModelLoadRefusesASizeTheModelDoesNotDivide) {
  const testing::TempModelDir dir("tiny", 1);
  ASSERT_TRUE(dir.status().ok());
  auto backend = make_cpu_backend(1);
  auto comms = make_local_communicators(3);
  ModelOptions o{.max_num_tokens = 16, .max_num_sequences = 2};
  o.tensor_parallel = {.rank = 0, .size = 3, .comm = comms[0].get()};
  auto m = Model::load(dir.path(), *backend, o);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("attention heads (4) is not divisible by 3"),
            std::string::npos)
      << m.status().to_string();
  o.tensor_parallel = {.rank = 0, .size = 2, .comm = nullptr};
  EXPECT_EQ(Model::load(dir.path(), *backend, o).status().code(), StatusCode::invalid_argument);
}

TEST(LocalCommunicator, SumsInRankOrderGathersColumnsAndAborts) {
  constexpr int kRanks = 3;
  auto comms = make_local_communicators(kRanks);
  std::vector<std::vector<float>> data(kRanks);
  std::vector<std::vector<float>> gathered(kRanks);
  const Status ran = on_ranks(kRanks, [&](int r) -> Status {
    // 7 elements: chunks of 3, 3, 1 (rank order of the reduction is fixed).
    const float big[] = {1e8f, 1.0f, -1e8f};
    data[r] = {1.0f * r, 2.0f, -1.0f * r, 0.5f, big[r], 1.0f * (r == 2), 3.0f};
    TensorView x(data[r].data(), DType::f32, {7}, Device::cpu);
    VPOD_RETURN_IF_ERROR(comms[r]->all_reduce_sum(x));
    std::vector<float> local = {10.0f * r, 10.0f * r + 1, 10.0f * r + 2, 10.0f * r + 3};
    TensorView l(local.data(), DType::f32, {2, 2}, Device::cpu);
    TensorView out;
    if (r == 0) {
      gathered[0].assign(2 * 2 * kRanks, -1.0f);
      out = TensorView(gathered[0].data(), DType::f32, {2, 2 * kRanks}, Device::cpu);
    }
    VPOD_RETURN_IF_ERROR(comms[r]->gather_columns(l, out));
    return comms[r]->barrier();
  });
  ASSERT_TRUE(ran.ok()) << ran.to_string();
  // 1e8 + 1 rounds to 1e8 in fp32, so the order decides element 4: in rank
  // order (1e8 + 1) - 1e8 = 0 on every rank (any other order gives 1).
  const std::vector<float> want = {3.0f, 6.0f, -3.0f, 1.5f, 0.0f, 1.0f, 9.0f};
  for (int r = 0; r < kRanks; ++r) EXPECT_EQ(data[r], want) << "rank " << r;
  EXPECT_EQ(gathered[0], (std::vector<float>{0, 1, 10, 11, 20, 21, 2, 3, 12, 13, 22, 23}));

  // A rank that fails aborts the group: the others' waits end with an error.
  const Status aborted = on_ranks(kRanks, [&](int r) -> Status {
    if (r == 1) {
      comms[r]->abort();
      return internal_error("rank 1 failed");
    }
    return comms[r]->barrier();
  });
  EXPECT_FALSE(aborted.ok());
  EXPECT_FALSE(comms[0]->barrier().ok());
}

}  // namespace
}  // namespace vpod::model
