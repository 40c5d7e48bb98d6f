// FlashInfer's paged attention: planning a step into its page lists and
// FlashInfer's work lists, and the launches (see paged_plan.h).
#include "kernels/attention/flashinfer/paged_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "common/cuda_check.h"

namespace vpod::attention::fi {

namespace {

constexpr int kHeadDim = 128;  // the only head_dim instantiated (every preset's)
// FlashInfer's FA2 tiles the decode units instantiate (fa2_decode_*.cu).
constexpr int kDecodeTiles[] = {16, 64};
// Indices of PrefillPlanInfo's vector (scheduler.cuh ToVector()).
constexpr int kFa2CtaTileQ = 3;
// FlashInfer's POD: the prefill size above which the wrapper plans the
// prefill's KV splits as if alone ("splitting small prefill causes
// unnecessary bandwidth contention", pod.py).
constexpr int kPodColocateUpToRows = 1536;
// Buffers grow to twice the need (at least 64 KiB), so growth stays rare.
constexpr std::size_t kMinBufferBytes = std::size_t{1} << 16;

std::size_t grown(std::size_t need) { return std::max(need * 2, kMinBufferBytes); }

// Grows `buffer` to hold `need` bytes; true when it moved.
Result<bool> reserve(cuda::DeviceBuffer& buffer, std::size_t need) {
  if (need <= buffer.bytes()) return false;
  buffer = {};
  VPOD_ASSIGN_OR_RETURN(buffer, cuda::DeviceBuffer::allocate(grown(need)));
  return true;
}

Status reserve(cuda::PinnedBuffer& buffer, std::size_t need) {
  if (need <= buffer.bytes()) return {};
  return buffer.reserve(grown(need));
}

Status flashinfer_error(const char* what, const std::string& error) {
  return internal_error(fmt::format("FlashInfer {}: {}", what, error));
}

// The device's architecture (major) and SM count.
Status query_device(int* cc_major, int* num_sms) {
  int device = 0;
  VPOD_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device), StatusCode::unavailable);
  VPOD_CUDA_RETURN_IF_ERROR(
      cudaDeviceGetAttribute(cc_major, cudaDevAttrComputeCapabilityMajor, device),
      StatusCode::unavailable);
  VPOD_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(num_sms, cudaDevAttrMultiProcessorCount, device),
                            StatusCode::unavailable);
  return {};
}

// FA3 where the device is an sm_90 and this build has its sm_90a code.
Result<PrefillBackend> prefill_backend_for(int cc_major) {
#ifdef VPOD_FLASHINFER_FA3
  if (cc_major == 9) return PrefillBackend::fa3;
#endif
#ifdef VPOD_FLASHINFER_FA2_PREFILL
  (void)cc_major;
  return PrefillBackend::fa2;
#else
  return unimplemented(fmt::format(
      "this build has no FlashInfer paged prefill for sm_{}x (FA3 is built for sm_90a only; "
      "add a non-90a architecture to VPOD_CUDA_ARCHS for FA2)",
      cc_major));
#endif
}

}  // namespace

Status paged_attention_supported(const AttentionDims& dims) {
  if (dims.head_dim != kHeadDim) {
    return unimplemented(
        fmt::format("the paged KV cache runs FlashInfer's kernels, built for head_dim {} (got {})",
                    kHeadDim, dims.head_dim));
  }
  if (dims.dtype != DType::f16 && dims.dtype != DType::bf16) {
    return unimplemented(fmt::format("FlashInfer's paged kernels run fp16 and bf16, not {}",
                                     dtype_name(dims.dtype)));
  }
  if (dims.num_kv_heads < 1 || dims.num_q_heads % dims.num_kv_heads != 0 ||
      dims.group_size() > 64) {
    return unimplemented(fmt::format(
        "FlashInfer's paged decode needs a GQA group of 1..64 ({} query heads, {} KV heads)",
        dims.num_q_heads, dims.num_kv_heads));
  }
  int cc_major = 0, num_sms = 0;
  VPOD_RETURN_IF_ERROR(query_device(&cc_major, &num_sms));
  return prefill_backend_for(cc_major).status();
}

Result<std::string> paged_kernels_label(PagedMode mode) {
  int cc_major = 0, num_sms = 0;
  VPOD_RETURN_IF_ERROR(query_device(&cc_major, &num_sms));
  VPOD_ASSIGN_OR_RETURN(const PrefillBackend prefill, prefill_backend_for(cc_major));
  const std::string serial = fmt::format("{} paged prefill + tensor-core decode",
                                         prefill == PrefillBackend::fa3 ? "FA3" : "FA2");
  return fmt::format("FlashInfer {}: {}", VPOD_FLASHINFER_VERSION_STRING,
                     mode == PagedMode::pod
                         ? "POD kernel (FA2 prefill + tensor-core decode, one launch) on hybrid "
                           "steps, else " +
                               serial
                         : serial);
}

void PagedPlan::clear() {
  num_prefill_tokens_ = 0;
  num_decodes_ = 0;
  fused_ = false;
  for (Part* part : {&prefill_, &decode_}) {
    part->batch_size = part->num_rows = 0;
    std::fill(std::begin(part->plan_info), std::end(part->plan_info), 0);
  }
}

int PagedPlan::decode_cta_tile_q() const {
  return decode_.batch_size > 0 ? static_cast<int>(decode_.plan_info[kFa2CtaTileQ]) : 0;
}

std::uint64_t PagedPlan::launch_key() const {
  std::uint64_t h = 0x9E3779B97F4A7C15ull;
  auto mix = [&h](std::uint64_t v) {
    h ^= v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
    h = (h ^ (h >> 31)) * 0xBF58476D1CE4E5B9ull;
  };
  for (const Part* part : {&prefill_, &decode_}) {
    if (part->batch_size == 0) continue;  // nothing of it is launched
    mix(static_cast<std::uint64_t>(part->batch_size) << 32 |
        static_cast<std::uint32_t>(part->num_rows));
    mix(part->qo_indptr);
    mix(part->kv_indptr);
    mix(part->last_page_len);
    mix(part->slots);
    mix(part->indices);
    for (std::int64_t v : part->plan_info) mix(static_cast<std::uint64_t>(v));
    mix(reinterpret_cast<std::uintptr_t>(part->int_workspace.data()));
  }
  mix(reinterpret_cast<std::uintptr_t>(pages_.data()));
  mix(reinterpret_cast<std::uintptr_t>(float_workspace_.data()));
  mix(static_cast<std::uint64_t>(prefill_backend_));
  if (fused_) {
    mix(reinterpret_cast<std::uintptr_t>(pod_float_workspace_.data()));
    mix(reinterpret_cast<std::uintptr_t>(pod_sched_.data()));
  }
  return h;
}

Status PagedPlan::lay_out_part(const std::vector<BatchSequence>& seqs, const PagedKvView& kv,
                               Part& part, std::size_t& cursor) {
  const int n = static_cast<int>(seqs.size());
  part.batch_size = n;
  part.num_rows = 0;
  part.qo_indptr_host.assign(1, 0);
  part.kv_indptr_host.assign(1, 0);
  part.kv_len_host.clear();
  if (n == 0) return {};
  for (const BatchSequence& s : seqs) {
    if (s.slot < 0 || s.slot >= kv.num_slots) {
      return out_of_range(
          fmt::format("sequence slot {} outside the block table's {} slots", s.slot, kv.num_slots));
    }
    if (s.num_new < 1 || s.cached_len < 0) {
      return invalid_argument(fmt::format("sequence in slot {} has {} new tokens after {}", s.slot,
                                          s.num_new, s.cached_len));
    }
    const int pages = (s.context_len() + page_size_ - 1) / page_size_;
    if (pages > kv.max_blocks_per_slot) {
      return out_of_range(fmt::format("context {} of slot {} needs {} blocks, the table has {}",
                                      s.context_len(), s.slot, pages, kv.max_blocks_per_slot));
    }
    part.num_rows += s.num_new;
    part.qo_indptr_host.push_back(part.num_rows);
    part.kv_indptr_host.push_back(part.kv_indptr_host.back() + pages);
    part.kv_len_host.push_back(s.context_len());
  }
  const std::size_t num_pages = static_cast<std::size_t>(part.kv_indptr_host.back());
  part.qo_indptr = cursor;
  part.kv_indptr = part.qo_indptr + n + 1;
  part.last_page_len = part.kv_indptr + n + 1;
  part.slots = part.last_page_len + n;
  part.indices = part.slots + n;
  cursor = part.indices + num_pages;
  return {};
}

void PagedPlan::write_part(const std::vector<BatchSequence>& seqs, const Part& part) {
  const int n = part.batch_size;
  if (n == 0) return;
  auto* image = static_cast<std::int32_t*>(pages_host_.data());
  std::memcpy(image + part.qo_indptr, part.qo_indptr_host.data(), (n + 1) * sizeof(std::int32_t));
  std::memcpy(image + part.kv_indptr, part.kv_indptr_host.data(), (n + 1) * sizeof(std::int32_t));
  for (int b = 0; b < n; ++b) {
    const int context = part.kv_len_host[b];
    const int pages = part.kv_indptr_host[b + 1] - part.kv_indptr_host[b];
    image[part.last_page_len + b] = context - (pages - 1) * page_size_;
    image[part.slots + b] = seqs[b].slot;
  }
}

Result<bool> PagedPlan::plan_part(Part& part, const PartPlan& how, cudaStream_t stream) {
  PlanBatch batch;
  batch.qo_indptr = part.qo_indptr_host.data();
  batch.kv_indptr = part.kv_indptr_host.data();
  batch.kv_len = part.kv_len_host.data();
  batch.batch_size = part.batch_size;
  batch.num_rows = part.num_rows;
  batch.num_qo_heads = dims_.num_q_heads;
  batch.num_kv_heads = dims_.num_kv_heads;
  batch.head_dim = dims_.head_dim;
  batch.page_size = page_size_;
  std::size_t float_bytes = 0, int_bytes = 0;
  if (how.fa3) {
    int_bytes = fa3_int_workspace_bytes(batch, num_sms_);
  } else {
    const std::string error =
        fa2_workspace_bytes(batch, how.cuda_graph, how.colocated_ctas, &float_bytes, &int_bytes);
    if (!error.empty()) return flashinfer_error("plan", error);
  }
  cuda::DeviceBuffer& floats = *how.floats;
  VPOD_ASSIGN_OR_RETURN(const bool int_moved, reserve(part.int_workspace, int_bytes));
  VPOD_ASSIGN_OR_RETURN(const bool float_moved, reserve(floats, float_bytes));
  VPOD_RETURN_IF_ERROR(reserve(part.pinned, part.int_workspace.bytes()));
  PlanBuffers buffers;
  buffers.int_workspace = part.int_workspace.data();
  buffers.pinned = part.pinned.data();
  buffers.int_bytes = part.int_workspace.bytes();
  buffers.float_workspace = floats.data();
  buffers.float_bytes = floats.bytes();
  std::fill(std::begin(part.plan_info), std::end(part.plan_info), 0);
  const std::string error = how.fa3 ? plan_fa3(buffers, batch, stream, part.plan_info)
                                    : plan_fa2(buffers, batch, how.cuda_graph, how.colocated_ctas,
                                               stream, part.plan_info);
  if (!error.empty()) return flashinfer_error("plan", error);
  return int_moved || float_moved;
}

Result<bool> PagedPlan::build(const HybridBatch& batch, const AttentionDims& dims,
                              const PagedKvView& kv, bool cuda_graph, cudaStream_t stream,
                              PagedMode mode) {
  clear();
  if (kv.device != Device::cuda || kv.block_table == nullptr || kv.block_size < 1) {
    return invalid_argument("FlashInfer's paged plan needs a CUDA paged view with a block table");
  }
  if (kv.dtype != dims.dtype || kv.head_dim != dims.head_dim ||
      kv.num_kv_heads != dims.num_kv_heads) {
    return invalid_argument("the paged KV view does not match the model's heads and dtype");
  }
  if (num_sms_ == 0) {
    VPOD_RETURN_IF_ERROR(paged_attention_supported(dims));
    VPOD_RETURN_IF_ERROR(query_device(&cc_major_, &num_sms_));
    VPOD_ASSIGN_OR_RETURN(prefill_backend_, prefill_backend_for(cc_major_));
    VPOD_ASSIGN_OR_RETURN(uploaded_, cuda::Event::create());
  } else if (dims.head_dim != dims_.head_dim || dims.dtype != dims_.dtype ||
             dims.group_size() > 64) {
    VPOD_RETURN_IF_ERROR(paged_attention_supported(dims));
  }
  dims_ = dims;
  page_size_ = kv.block_size;
  for (const BatchSequence& d : batch.decodes) {
    if (d.num_new != 1) return invalid_argument("a decode has one new token");
  }
  // The staging below is rewritten: the previous step's copies must have run.
  if (upload_pending_) {
    VPOD_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(uploaded_.get()), StatusCode::internal);
    upload_pending_ = false;
  }
  std::size_t cursor = 0;
  VPOD_RETURN_IF_ERROR(lay_out_part(batch.decodes, kv, decode_, cursor));
  VPOD_RETURN_IF_ERROR(lay_out_part(batch.prefills, kv, prefill_, cursor));
  if (cursor == 0) return false;
  // One reservation for both parts (growth does not keep the contents).
  VPOD_RETURN_IF_ERROR(reserve(pages_host_, cursor * sizeof(std::int32_t)));
  write_part(batch.decodes, decode_);
  write_part(batch.prefills, prefill_);
  VPOD_ASSIGN_OR_RETURN(bool moved, reserve(pages_, cursor * sizeof(std::int32_t)));
  // FlashInfer's POD kernel runs a decode query tile of 16 rows: GQA groups
  // up to 16 (its planner packs a decode's group into one tile).
  const bool pod = mode == PagedMode::pod && decode_.batch_size > 0 && prefill_.batch_size > 0 &&
                   dims.group_size() <= kPodDecodeTileQ;
  if (decode_.batch_size > 0) {
    VPOD_ASSIGN_OR_RETURN(
        const bool m,
        plan_part(decode_, {.cuda_graph = cuda_graph, .floats = &float_workspace_}, stream));
    moved = moved || m;
  }
  if (pod) {
    // As BatchPODWithPagedKVCacheWrapper.plan: the prefill half (FA2) plans
    // its KV splits around the decode half's CTAs, unless it is large.
    const int colocated = prefill_.num_rows > kPodColocateUpToRows
                              ? 0
                              : static_cast<int>(fa2_padded_batch_size(decode_.plan_info));
    VPOD_ASSIGN_OR_RETURN(const bool m, plan_part(prefill_,
                                                  {.cuda_graph = false,
                                                   .colocated_ctas = colocated,
                                                   .floats = &pod_float_workspace_},
                                                  stream));
    VPOD_ASSIGN_OR_RETURN(const bool s, reserve(pod_sched_, kPodSchedInts * sizeof(std::int32_t)));
    moved = moved || m || s;
  } else if (prefill_.batch_size > 0) {
    VPOD_ASSIGN_OR_RETURN(const bool m, plan_part(prefill_,
                                                  {.fa3 = prefill_backend_ == PrefillBackend::fa3,
                                                   .floats = &float_workspace_},
                                                  stream));
    moved = moved || m;
  }
  VPOD_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(pages_.data(), pages_host_.data(), cursor * sizeof(std::int32_t),
                      cudaMemcpyHostToDevice, stream),
      StatusCode::internal);
  uploaded_.record(stream);
  upload_pending_ = true;
  auto* pages = pages_.as<std::int32_t>();
  for (const Part* part : {&decode_, &prefill_}) {
    const std::string error =
        gather_pages(kv.block_table, kv.max_blocks_per_slot, pages + part->slots,
                     pages + part->kv_indptr, part->batch_size, pages + part->indices, stream);
    if (!error.empty()) return flashinfer_error("page gather", error);
  }
  // Checked once the uploads are enqueued and their event recorded (the
  // planners' copies read the staging either way).
  if (decode_.batch_size > 0) {
    const int tile = decode_cta_tile_q();
    if (std::find(std::begin(kDecodeTiles), std::end(kDecodeTiles), tile) ==
        std::end(kDecodeTiles)) {
      return unimplemented(fmt::format("FlashInfer's decode planned query tile {}", tile));
    }
  }
  if (pod && decode_cta_tile_q() != kPodDecodeTileQ) {
    return unimplemented(
        fmt::format("FlashInfer's POD kernel runs a 16-row decode tile; its planner chose {}",
                    decode_cta_tile_q()));
  }
  fused_ = pod;
  num_prefill_tokens_ = prefill_.num_rows;
  num_decodes_ = decode_.batch_size;
  return moved;
}

Status PagedPlan::validate_launch(const TensorView& q, const PagedKvView& kv, const TensorView& out,
                                  float softmax_scale) const {
  if (!(softmax_scale > 0.0f)) return invalid_argument("softmax scale must be > 0");
  if (kv.device != Device::cuda || kv.dtype != dims_.dtype || kv.head_dim != dims_.head_dim ||
      kv.num_kv_heads != dims_.num_kv_heads || kv.block_size != page_size_) {
    return invalid_argument("the paged KV view does not match the plan");
  }
  if (kv.head_stride != dims_.head_dim ||
      kv.token_stride != static_cast<std::int64_t>(kv.num_kv_heads) * kv.head_stride ||
      kv.block_stride != static_cast<std::int64_t>(kv.block_size) * kv.token_stride) {
    return invalid_argument("FlashInfer reads NHD pages [pages, page_size, kv_heads, head_dim]");
  }
  for (const auto& [name, view, heads] :
       {std::tuple{"q", &q, dims_.num_q_heads}, std::tuple{"out", &out, dims_.num_q_heads}}) {
    if (view->device() != Device::cuda || view->dtype() != dims_.dtype || view->rank() != 3 ||
        view->size(0) < num_tokens() || view->size(1) != heads || view->size(2) != dims_.head_dim ||
        view->stride(2) != 1 || view->stride(1) != dims_.head_dim) {
      return invalid_argument(
          fmt::format("{} must be [>= {}, {}, {}] with contiguous heads, got {}", name,
                      num_tokens(), heads, dims_.head_dim, view->to_string()));
    }
  }
  if (out.stride(0) != static_cast<std::int64_t>(dims_.num_q_heads) * dims_.head_dim) {
    return invalid_argument(fmt::format("out must be contiguous, got {}", out.to_string()));
  }
  return {};
}

RunArgs PagedPlan::run_args(const Part& part, int row_offset, const TensorView& q,
                            const PagedKvView& kv, const TensorView& out, float softmax_scale,
                            cudaStream_t stream, const cuda::DeviceBuffer& floats) const {
  const std::size_t elem = dtype_size(dims_.dtype);
  RunArgs a;
  a.dtype = dims_.dtype == DType::bf16 ? Element::bf16 : Element::f16;
  a.head_dim = dims_.head_dim;
  a.num_qo_heads = dims_.num_q_heads;
  a.q = static_cast<std::byte*>(q.data()) + row_offset * q.stride(0) * elem;
  a.q_stride_n = q.stride(0);
  a.q_stride_h = q.stride(1);
  a.o = static_cast<std::byte*>(out.data()) + row_offset * out.stride(0) * elem;
  a.o_stride_n = out.stride(0);
  a.o_stride_h = out.stride(1);
  a.num_rows = part.num_rows;
  a.batch_size = part.batch_size;
  auto* pages = pages_.as<std::int32_t>();
  a.qo_indptr = pages + part.qo_indptr;
  a.kv.k = kv.k;
  a.kv.v = kv.v;
  a.kv.page_stride = kv.block_stride;
  a.kv.token_stride = kv.token_stride;
  a.kv.head_stride = kv.head_stride;
  a.kv.page_size = kv.block_size;
  a.kv.num_kv_heads = kv.num_kv_heads;
  a.kv.indices = pages + part.indices;
  a.kv.indptr = pages + part.kv_indptr;
  a.kv.last_page_len = pages + part.last_page_len;
  a.sm_scale = softmax_scale;
  a.int_workspace = part.int_workspace.data();
  a.float_workspace = floats.data();
  std::copy(std::begin(part.plan_info), std::end(part.plan_info), a.plan_info);
  a.stream = stream;
  return a;
}

Status PagedPlan::prefill(const TensorView& q, const PagedKvView& kv, const TensorView& out,
                          float softmax_scale, cudaStream_t stream) const {
  if (prefill_.batch_size == 0) return {};
  if (fused_) return failed_precondition("the step is planned for FlashInfer's POD kernel: run()");
  VPOD_RETURN_IF_ERROR(validate_launch(q, kv, out, softmax_scale));
  const RunArgs args = run_args(prefill_, 0, q, kv, out, softmax_scale, stream, float_workspace_);
  const bool bf16 = args.dtype == Element::bf16;
  std::string error;
  if (prefill_backend_ == PrefillBackend::fa3) {
#ifdef VPOD_FLASHINFER_FA3
    error = bf16 ? run_fa3_prefill_bf16(args) : run_fa3_prefill_f16(args);
#else
    error = "FA3 is not built";
#endif
  } else {
#ifdef VPOD_FLASHINFER_FA2_PREFILL
    error = bf16 ? run_fa2_prefill_bf16(args) : run_fa2_prefill_f16(args);
#else
    error = "FA2 prefill is not built";
#endif
  }
  if (!error.empty()) return flashinfer_error("prefill", error);
  return {};
}

Status PagedPlan::decode(const TensorView& q, const PagedKvView& kv, const TensorView& out,
                         float softmax_scale, cudaStream_t stream) const {
  if (decode_.batch_size == 0) return {};
  if (fused_) return failed_precondition("the step is planned for FlashInfer's POD kernel: run()");
  VPOD_RETURN_IF_ERROR(validate_launch(q, kv, out, softmax_scale));
  const RunArgs args =
      run_args(decode_, num_prefill_tokens_, q, kv, out, softmax_scale, stream, float_workspace_);
  const std::string error =
      args.dtype == Element::bf16 ? run_fa2_decode_bf16(args) : run_fa2_decode_f16(args);
  if (!error.empty()) return flashinfer_error("decode", error);
  return {};
}

Status PagedPlan::run_pod(const TensorView& q, const PagedKvView& kv, const TensorView& out,
                          float softmax_scale, cudaStream_t stream) const {
  VPOD_RETURN_IF_ERROR(validate_launch(q, kv, out, softmax_scale));
  const RunArgs prefill =
      run_args(prefill_, 0, q, kv, out, softmax_scale, stream, pod_float_workspace_);
  const RunArgs decode =
      run_args(decode_, num_prefill_tokens_, q, kv, out, softmax_scale, stream, float_workspace_);
  auto* sched = pod_sched_.as<std::int32_t>();
  const std::string error = prefill.dtype == Element::bf16
                                ? run_fa2_pod_bf16(prefill, decode, sched)
                                : run_fa2_pod_f16(prefill, decode, sched);
  if (!error.empty()) return flashinfer_error("POD", error);
  return {};
}

Status PagedPlan::run(const TensorView& q, const PagedKvView& kv, const TensorView& out,
                      float softmax_scale, cudaStream_t stream) const {
  if (fused_) return run_pod(q, kv, out, softmax_scale, stream);
  VPOD_RETURN_IF_ERROR(prefill(q, kv, out, softmax_scale, stream));
  return decode(q, kv, out, softmax_scale, stream);
}

}  // namespace vpod::attention::fi
