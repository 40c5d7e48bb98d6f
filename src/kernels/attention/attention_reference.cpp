// CPU references of KV append and attention (contiguous and paged K/V).
#include "kernels/attention/attention_reference.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <thread>

namespace vpod::attention {
namespace {

// Where row (slot, token, head) of K or V lives in host memory.
struct HostKv {
  const char* k = nullptr;
  const char* v = nullptr;
  DType dtype = DType::f16;
  std::int64_t outer_stride = 0;
  std::int64_t token_stride = 0;
  std::int64_t head_stride = 0;
  const std::int32_t* block_table = nullptr;  // null: contiguous
  int block_table_stride = 0;
  int block_size = 1;

  std::int64_t offset(int slot, int token, int head) const {
    std::int64_t off;
    if (block_table == nullptr) {
      off = slot * outer_stride + token * token_stride;
    } else {
      const int block =
          block_table[static_cast<std::int64_t>(slot) * block_table_stride + token / block_size];
      off = block * outer_stride + (token % block_size) * token_stride;
    }
    return (off + head * head_stride) * static_cast<std::int64_t>(dtype_size(dtype));
  }
};

// The reference runs any head count, head_dim and dtype (the CPU backend's
// fp32 models too), not only what the kernels support (validate_dims).
Status check_reference_dims(const AttentionDims& dims) {
  if (dims.num_q_heads < 1 || dims.num_kv_heads < 1 || dims.num_q_heads % dims.num_kv_heads != 0 ||
      dims.head_dim < 1) {
    return invalid_argument(
        fmt::format("reference attention dims: {} query heads, {} KV heads, "
                    "head_dim {}",
                    dims.num_q_heads, dims.num_kv_heads, dims.head_dim));
  }
  return Status();
}

Status check_cpu_kv(Device device, DType dtype, int heads, int head_dim, const AttentionDims& dims,
                    const HybridBatch& batch, int num_slots, std::int64_t max_ctx) {
  VPOD_RETURN_IF_ERROR(check_reference_dims(dims));
  if (device != Device::cpu) return invalid_argument("reference K/V must be on the cpu");
  if (dtype != dims.dtype || heads != dims.num_kv_heads || head_dim != dims.head_dim) {
    return invalid_argument("reference K/V dtype or shape differs from the attention dims");
  }
  for (const auto* list : {&batch.prefills, &batch.decodes}) {
    for (const BatchSequence& s : *list) {
      if (s.slot < 0 || s.slot >= num_slots || s.context_len() > max_ctx) {
        return out_of_range(fmt::format("sequence in slot {} with {} tokens exceeds the KV view",
                                        s.slot, s.context_len()));
      }
    }
  }
  return Status();
}

Status check_token_view(const char* name, const TensorView& t, int tokens, int heads,
                        int head_dim) {
  if (t.device() != Device::cpu || t.rank() != 3 || t.size(0) < tokens || t.size(1) != heads ||
      t.size(2) != head_dim) {
    return invalid_argument(fmt::format("reference {} must be a cpu [>= {}, {}, {}] view, got {}",
                                        name, tokens, heads, head_dim, t.to_string()));
  }
  return Status();
}

float round_to(DType dtype, float x) {
  switch (dtype) {
    case DType::f16: return half_bits_to_float(float_to_half_bits(x));
    case DType::bf16: return bf16_bits_to_float(float_to_bf16_bits(x));
    case DType::f32: return x;
  }
  return x;
}

void load_row(const char* src, DType dtype, int n, float* dst) {
  for (int i = 0; i < n; ++i) dst[i] = load_as_float(src, dtype, static_cast<std::size_t>(i));
}

// One (sequence, kv head, block of rows) task: gathers that head's K/V once
// and computes every selected row of every query head of the group.
template <typename Acc>
void attend_rows(const BatchSequence& s, int kv_head, int row_begin, int row_end,
                 const AttentionDims& dims, const TensorView& q, const HostKv& kv,
                 const TensorView& out, float softmax_scale, ReferencePrecision precision,
                 const std::vector<char>& selected) {
  const int d = dims.head_dim;
  const int group = dims.group_size();
  const int ctx = s.cached_len + row_end;  // keys any row of the block may need
  std::vector<float> k(static_cast<std::size_t>(ctx) * d), v(k.size());
  for (int t = 0; t < ctx; ++t) {
    load_row(kv.k + kv.offset(s.slot, t, kv_head), kv.dtype, d,
             &k[static_cast<std::size_t>(t) * d]);
    load_row(kv.v + kv.offset(s.slot, t, kv_head), kv.dtype, d,
             &v[static_cast<std::size_t>(t) * d]);
  }
  std::vector<float> qrow(d);
  std::vector<Acc> scores(ctx), acc(d);
  const bool naive = precision == ReferencePrecision::naive;
  for (int i = row_begin; i < row_end; ++i) {
    const int token = s.token_offset + i;
    if (!selected.empty() && !selected[token]) continue;
    const int keys = s.cached_len + i + 1;  // bottom-right causal
    for (int g = 0; g < group; ++g) {
      const int head = kv_head * group + g;
      for (int c = 0; c < d; ++c) qrow[c] = q.get({token, head, c});
      Acc max_score = -std::numeric_limits<Acc>::infinity();
      for (int t = 0; t < keys; ++t) {
        Acc dot = 0;
        const float* kt = &k[static_cast<std::size_t>(t) * d];
        for (int c = 0; c < d; ++c) dot += static_cast<Acc>(qrow[c]) * static_cast<Acc>(kt[c]);
        Acc score = dot * static_cast<Acc>(softmax_scale);
        if (naive) {
          score =
              round_to(dims.dtype, round_to(dims.dtype, static_cast<float>(dot)) * softmax_scale);
        }
        scores[t] = score;
        max_score = std::max(max_score, score);
      }
      // The denominator sums in double (in naive: in Acc, as an unfused
      // implementation would), so fp32 is exactly the CPU backend's attention.
      double sum = 0;
      Acc naive_sum = 0;
      for (int t = 0; t < keys; ++t) {
        scores[t] = std::exp(scores[t] - max_score);
        if (naive) {
          naive_sum += scores[t];
        } else {
          sum += scores[t];
        }
      }
      std::fill(acc.begin(), acc.end(), Acc(0));
      for (int t = 0; t < keys; ++t) {
        Acc weight = naive ? scores[t] / naive_sum : static_cast<Acc>(scores[t] / sum);
        if (naive) weight = round_to(dims.dtype, static_cast<float>(weight));
        const float* vt = &v[static_cast<std::size_t>(t) * d];
        for (int c = 0; c < d; ++c) acc[c] += weight * static_cast<Acc>(vt[c]);
      }
      for (int c = 0; c < d; ++c) {
        const float value = static_cast<float>(acc[c]);
        out.set({token, head, c}, naive ? round_to(dims.dtype, value) : value);
      }
    }
  }
}

Status reference_attention_impl(const HybridBatch& batch, const AttentionDims& dims,
                                const TensorView& q, const HostKv& kv, const TensorView& out,
                                float softmax_scale, ReferencePrecision precision,
                                ReferencePart part, const std::vector<int>& tokens) {
  VPOD_RETURN_IF_ERROR(check_reference_dims(dims));
  const int num_tokens = batch.num_tokens();
  VPOD_RETURN_IF_ERROR(check_token_view("q", q, num_tokens, dims.num_q_heads, dims.head_dim));
  VPOD_RETURN_IF_ERROR(check_token_view("out", out, num_tokens, dims.num_q_heads, dims.head_dim));
  if (out.dtype() != DType::f32) return invalid_argument("reference out must be fp32");
  std::vector<char> selected;
  if (!tokens.empty()) {
    selected.assign(static_cast<std::size_t>(num_tokens), 0);
    for (int t : tokens) {
      if (t < 0 || t >= num_tokens) {
        return out_of_range(
            fmt::format("selected row {} is outside the batch's {} rows", t, num_tokens));
      }
      selected[static_cast<std::size_t>(t)] = 1;
    }
  }
  // Tasks: (sequence, kv head, block of rows), spread over the CPU's cores.
  constexpr int kRowsPerTask = 64;
  struct Task {
    const BatchSequence* seq;
    int kv_head, row_begin, row_end;
  };
  std::vector<Task> tasks;
  auto add = [&](const std::vector<BatchSequence>& list) {
    for (const BatchSequence& s : list) {
      for (int r = 0; r < s.num_new; r += kRowsPerTask) {
        const int end = std::min(s.num_new, r + kRowsPerTask);
        bool any = selected.empty();
        for (int i = r; i < end && !any; ++i) any = selected[s.token_offset + i] != 0;
        if (!any) continue;
        for (int h = 0; h < dims.num_kv_heads; ++h) tasks.push_back({&s, h, r, end});
      }
    }
  };
  if (part != ReferencePart::decode) add(batch.prefills);
  if (part != ReferencePart::prefill) add(batch.decodes);
  std::atomic<std::size_t> next{0};
  auto worker = [&] {
    for (std::size_t i = next++; i < tasks.size(); i = next++) {
      const Task& t = tasks[i];
      if (precision == ReferencePrecision::fp64) {
        attend_rows<double>(*t.seq, t.kv_head, t.row_begin, t.row_end, dims, q, kv, out,
                            softmax_scale, precision, selected);
      } else {
        attend_rows<float>(*t.seq, t.kv_head, t.row_begin, t.row_end, dims, q, kv, out,
                           softmax_scale, precision, selected);
      }
    }
  };
  const unsigned threads =
      std::min<std::size_t>(std::max(1u, std::thread::hardware_concurrency()), tasks.size());
  std::vector<std::thread> pool;
  for (unsigned i = 1; i < threads; ++i) pool.emplace_back(worker);
  worker();
  for (std::thread& t : pool) t.join();
  return Status();
}

Status append_impl(const HybridBatch& batch, const AttentionDims& dims, const TensorView& k_new,
                   const TensorView& v_new, const HostKv& kv, char* k_mut, char* v_mut) {
  const int num_tokens = batch.num_tokens();
  VPOD_RETURN_IF_ERROR(
      check_token_view("k_new", k_new, num_tokens, dims.num_kv_heads, dims.head_dim));
  VPOD_RETURN_IF_ERROR(
      check_token_view("v_new", v_new, num_tokens, dims.num_kv_heads, dims.head_dim));
  if (k_new.dtype() != dims.dtype || v_new.dtype() != dims.dtype) {
    return invalid_argument("reference k_new/v_new dtype differs from the attention dims");
  }
  if (k_new.stride(2) != 1 || v_new.stride(2) != 1) {
    return invalid_argument("reference k_new/v_new need a contiguous head_dim");
  }
  const std::size_t row_bytes = static_cast<std::size_t>(dims.head_dim) * dtype_size(dims.dtype);
  for (const auto* list : {&batch.prefills, &batch.decodes}) {
    for (const BatchSequence& s : *list) {
      for (int i = 0; i < s.num_new; ++i) {
        const int token = s.token_offset + i;
        for (int h = 0; h < dims.num_kv_heads; ++h) {
          const std::int64_t dst = kv.offset(s.slot, s.cached_len + i, h);
          std::memcpy(k_mut + dst, k_new.ptr<std::uint16_t>({token, h, 0}), row_bytes);
          std::memcpy(v_mut + dst, v_new.ptr<std::uint16_t>({token, h, 0}), row_bytes);
        }
      }
    }
  }
  return Status();
}

HostKv host_kv(const KvLayerView& kv) {
  HostKv h;
  h.k = static_cast<const char*>(kv.k);
  h.v = static_cast<const char*>(kv.v);
  h.dtype = kv.dtype;
  h.outer_stride = kv.slot_stride;
  h.token_stride = kv.token_stride;
  h.head_stride = kv.head_stride;
  return h;
}

Result<HostKv> host_kv(const PagedKvView& kv) {
  if (kv.block_table == nullptr || kv.block_size < 1) {
    return invalid_argument("reference paged K/V needs a block table and block_size >= 1");
  }
  HostKv h;
  h.k = static_cast<const char*>(kv.k);
  h.v = static_cast<const char*>(kv.v);
  h.dtype = kv.dtype;
  h.outer_stride = kv.block_stride;
  h.token_stride = kv.token_stride;
  h.head_stride = kv.head_stride;
  h.block_table = kv.block_table;
  h.block_table_stride = kv.max_blocks_per_slot;
  h.block_size = kv.block_size;
  return h;
}

}  // namespace

Status reference_attention(const HybridBatch& batch, const AttentionDims& dims, const TensorView& q,
                           const KvLayerView& kv, const TensorView& out, float softmax_scale,
                           ReferencePrecision precision, ReferencePart part,
                           const std::vector<int>& tokens) {
  VPOD_RETURN_IF_ERROR(check_cpu_kv(kv.device, kv.dtype, kv.num_kv_heads, kv.head_dim, dims, batch,
                                    kv.num_slots, kv.max_ctx));
  return reference_attention_impl(batch, dims, q, host_kv(kv), out, softmax_scale, precision, part,
                                  tokens);
}

Status reference_attention(const HybridBatch& batch, const AttentionDims& dims, const TensorView& q,
                           const PagedKvView& kv, const TensorView& out, float softmax_scale,
                           ReferencePrecision precision, ReferencePart part,
                           const std::vector<int>& tokens) {
  VPOD_RETURN_IF_ERROR(
      check_cpu_kv(kv.device, kv.dtype, kv.num_kv_heads, kv.head_dim, dims, batch, kv.num_slots,
                   static_cast<std::int64_t>(kv.max_blocks_per_slot) * kv.block_size));
  VPOD_ASSIGN_OR_RETURN(HostKv h, host_kv(kv));
  return reference_attention_impl(batch, dims, q, h, out, softmax_scale, precision, part, tokens);
}

Status reference_append_kv(const HybridBatch& batch, const AttentionDims& dims,
                           const TensorView& k_new, const TensorView& v_new,
                           const KvLayerView& kv) {
  VPOD_RETURN_IF_ERROR(check_cpu_kv(kv.device, kv.dtype, kv.num_kv_heads, kv.head_dim, dims, batch,
                                    kv.num_slots, kv.max_ctx));
  return append_impl(batch, dims, k_new, v_new, host_kv(kv), static_cast<char*>(kv.k),
                     static_cast<char*>(kv.v));
}

Status reference_append_kv(const HybridBatch& batch, const AttentionDims& dims,
                           const TensorView& k_new, const TensorView& v_new,
                           const PagedKvView& kv) {
  VPOD_RETURN_IF_ERROR(
      check_cpu_kv(kv.device, kv.dtype, kv.num_kv_heads, kv.head_dim, dims, batch, kv.num_slots,
                   static_cast<std::int64_t>(kv.max_blocks_per_slot) * kv.block_size));
  VPOD_ASSIGN_OR_RETURN(HostKv h, host_kv(kv));
  return append_impl(batch, dims, k_new, v_new, h, static_cast<char*>(kv.k),
                     static_cast<char*>(kv.v));
}

}  // namespace vpod::attention
