// NCCL through dlopen (nccl_communicator.h): the entry points, the id, and
// the communicator's collectives on the rank's stream.
#include "model/nccl_communicator.h"

#include <dlfcn.h>
#include <nccl.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#include <fmt/format.h>

#include "common/cuda_check.h"
#include "common/log.h"
#include "cuda/device_buffer.h"

namespace vpod::model {

namespace {

struct NcclApi {
  void* lib = nullptr;
  decltype(&ncclGetVersion) get_version = nullptr;
  decltype(&ncclGetUniqueId) get_unique_id = nullptr;
  decltype(&ncclCommInitRank) comm_init_rank = nullptr;
  decltype(&ncclCommDestroy) comm_destroy = nullptr;
  decltype(&ncclCommAbort) comm_abort = nullptr;
  decltype(&ncclAllReduce) all_reduce = nullptr;
  decltype(&ncclSend) send = nullptr;
  decltype(&ncclRecv) recv = nullptr;
  decltype(&ncclGroupStart) group_start = nullptr;
  decltype(&ncclGroupEnd) group_end = nullptr;
  decltype(&ncclGetErrorString) error_string = nullptr;
  int version = 0;
};

// Where libnccl.so.2 may be: the loader's path, the CUDA toolkit, and
// $VPOD_NCCL_LIBRARY first when set (e.g. a pip wheel's nvidia/nccl/lib).
Status load_api(NcclApi& api) {
  std::vector<std::string> names;
  if (const char* env = std::getenv("VPOD_NCCL_LIBRARY"); env != nullptr && *env != '\0') {
    names.emplace_back(env);
  }
  for (const char* n :
       {"libnccl.so.2", "/usr/local/cuda/lib/libnccl.so.2", "/usr/local/cuda/lib64/libnccl.so.2",
        "/usr/lib/x86_64-linux-gnu/libnccl.so.2"}) {
    names.emplace_back(n);
  }
  std::string path;
  for (const std::string& n : names) {
    api.lib = dlopen(n.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (api.lib != nullptr) {
      path = n;
      break;
    }
  }
  if (api.lib == nullptr) {
    return unavailable(
        "NCCL not found (dlopen libnccl.so.2 in the loader's path and /usr/local/cuda/lib{,64} "
        "failed; set VPOD_NCCL_LIBRARY to its path): tensor parallelism on CUDA needs it");
  }
  std::string missing;
  auto resolve = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(api.lib, name));
    if (fn == nullptr && missing.empty()) missing = name;
  };
  resolve(api.get_version, "ncclGetVersion");
  resolve(api.get_unique_id, "ncclGetUniqueId");
  resolve(api.comm_init_rank, "ncclCommInitRank");
  resolve(api.comm_destroy, "ncclCommDestroy");
  resolve(api.comm_abort, "ncclCommAbort");
  resolve(api.all_reduce, "ncclAllReduce");
  resolve(api.send, "ncclSend");
  resolve(api.recv, "ncclRecv");
  resolve(api.group_start, "ncclGroupStart");
  resolve(api.group_end, "ncclGroupEnd");
  resolve(api.error_string, "ncclGetErrorString");
  if (!missing.empty()) return unavailable(path + " lacks " + missing);
  if (api.get_version(&api.version) != ncclSuccess)
    return unavailable(path + ": ncclGetVersion failed");
  return {};
}

// Loaded once, never unloaded (communicators may outlive any one user).
struct NcclState {
  std::once_flag once;
  NcclApi api;
  Status status;
};
NcclState& state() {
  static NcclState s;
  return s;
}
const NcclApi& api() { return state().api; }

Status nccl_status(ncclResult_t r, const char* what) {
  if (r == ncclSuccess) return {};
  const char* text = api().error_string != nullptr ? api().error_string(r) : "";
  return internal_error(fmt::format("NCCL {}: {} ({})", what, nccl_error_message(r), text));
}

Result<ncclDataType_t> nccl_type(DType d) {
  switch (d) {
    case DType::f32: return ncclFloat32;
    case DType::f16: return ncclFloat16;
    case DType::bf16: return ncclBfloat16;
  }
  return invalid_argument("NCCL: unsupported dtype");
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, int rank, int size, cudaStream_t stream)
      : comm_(comm), rank_(rank), size_(size), stream_(stream) {}
  ~NcclCommunicator() override {
    if (comm_ != nullptr) {
      cudaStreamSynchronize(stream_);
      if (aborted_) {
        api().comm_abort(comm_);
      } else {
        api().comm_destroy(comm_);
      }
    }
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string description() const override { return "nccl " + nccl_version(); }

  Status all_reduce_sum(const TensorView& x) override {
    VPOD_CHECK_MSG(x.device() == Device::cuda && x.is_contiguous(),
                   "NCCL all_reduce_sum needs a contiguous device tensor: " + x.to_string());
    if (aborted_) return aborted();
    VPOD_ASSIGN_OR_RETURN(const ncclDataType_t type, nccl_type(x.dtype()));
    return nccl_status(api().all_reduce(x.data(), x.data(), static_cast<std::size_t>(x.numel()),
                                        type, ncclSum, comm_, stream_),
                       "all_reduce");
  }

  Status reserve_gather(std::size_t bytes) override {
    if (rank_ != 0 || bytes * (size_ - 1) <= staging_.bytes()) return {};
    VPOD_ASSIGN_OR_RETURN(staging_, cuda::DeviceBuffer::allocate(bytes * (size_ - 1)));
    return {};
  }

  // Rank r > 0 sends its block to rank 0, which receives block r into
  // staging slot r - 1, then copies every block into its column range of
  // `out` with one 2-D copy each (all on the stream: capturable).
  Status gather_columns(const TensorView& local, const TensorView& out) override {
    VPOD_CHECK_MSG(local.device() == Device::cuda && local.rank() == 2 && local.is_contiguous(),
                   "gather_columns: local must be a contiguous device [rows, cols] tensor");
    if (aborted_) return aborted();
    VPOD_ASSIGN_OR_RETURN(const ncclDataType_t type, nccl_type(local.dtype()));
    const std::size_t count = static_cast<std::size_t>(local.numel());
    const std::size_t elem = dtype_size(local.dtype());
    const std::size_t block_bytes = count * elem;
    if (rank_ != 0) {
      return nccl_status(api().send(local.data(), count, type, 0, comm_, stream_), "send");
    }
    const std::int64_t rows = local.size(0);
    const std::int64_t cols = local.size(1);
    VPOD_CHECK_MSG(out.rank() == 2 && out.size(0) == rows && out.size(1) == size_ * cols &&
                       out.is_contiguous() && out.dtype() == local.dtype(),
                   "gather_columns: out must be [rows, size * cols]: " + out.to_string());
    VPOD_CHECK_MSG(block_bytes * (size_ - 1) <= staging_.bytes(),
                   "gather_columns beyond reserve_gather");
    auto* staging = static_cast<std::uint8_t*>(staging_.data());
    VPOD_RETURN_IF_ERROR(nccl_status(api().group_start(), "group_start"));
    for (int r = 1; r < size_; ++r) {
      const Status s = nccl_status(
          api().recv(staging + (r - 1) * block_bytes, count, type, r, comm_, stream_), "recv");
      if (!s.ok()) {
        (void)api().group_end();
        return s;
      }
    }
    VPOD_RETURN_IF_ERROR(nccl_status(api().group_end(), "group_end"));
    const std::size_t row_bytes = static_cast<std::size_t>(cols) * elem;
    for (int r = 0; r < size_; ++r) {
      const void* src = r == 0 ? local.data() : staging + (r - 1) * block_bytes;
      VPOD_CUDA_RETURN_IF_ERROR(
          cudaMemcpy2DAsync(static_cast<std::uint8_t*>(out.data()) + r * row_bytes,
                            row_bytes * size_, src, row_bytes, row_bytes,
                            static_cast<std::size_t>(rows), cudaMemcpyDeviceToDevice, stream_),
          StatusCode::internal);
    }
    return {};
  }

  // An all-reduce of one float, waited for on the host.
  Status barrier() override {
    if (aborted_) return aborted();
    if (token_.bytes() == 0) {
      VPOD_ASSIGN_OR_RETURN(token_, cuda::DeviceBuffer::allocate(sizeof(float)));
    }
    VPOD_RETURN_IF_ERROR(nccl_status(
        api().all_reduce(token_.data(), token_.data(), 1, ncclFloat32, ncclSum, comm_, stream_),
        "barrier"));
    VPOD_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_), StatusCode::internal);
    return {};
  }

  void abort() override { aborted_ = true; }

 private:
  static Status aborted() {
    return internal_error("tensor-parallel group aborted: another rank failed");
  }

  ncclComm_t comm_;
  int rank_, size_;
  cudaStream_t stream_;
  cuda::DeviceBuffer staging_;  // rank 0: [size - 1] blocks of gather_columns
  cuda::DeviceBuffer token_;    // barrier's operand
  bool aborted_ = false;
};

}  // namespace

Status load_nccl() {
  NcclState& s = state();
  std::call_once(s.once, [&s] {
    // Before NCCL reads its environment (at the first id or communicator).
    const char* nvls = std::getenv("NCCL_NVLS_ENABLE");
    if (nvls == nullptr) {
      ::setenv("NCCL_NVLS_ENABLE", "0", 0);
    } else if (std::strcmp(nvls, "0") != 0) {
      VPOD_LOG_WARN(
          "NCCL_NVLS_ENABLE={} is kept as set: NVLink multicast may be used (vpod turns it off "
          "by default)",
          nvls);
    }
    s.status = load_api(s.api);
  });
  return s.status;
}

std::string nccl_version() {
  const int v = api().version;  // major * 10000 + minor * 100 + patch (2.9+)
  return fmt::format("{}.{}.{}", v / 10000, v / 100 % 100, v % 100);
}

Result<NcclId> nccl_unique_id() {
  VPOD_RETURN_IF_ERROR(load_nccl());
  ncclUniqueId id;
  VPOD_RETURN_IF_ERROR(nccl_status(api().get_unique_id(&id), "get_unique_id"));
  static_assert(sizeof(id.internal) == NcclId::kBytes);
  NcclId out;
  std::memcpy(out.bytes.data(), id.internal, NcclId::kBytes);
  return out;
}

Result<std::unique_ptr<Communicator>> make_nccl_communicator(const NcclId& id, int rank, int size,
                                                             cudaStream_t stream) {
  VPOD_RETURN_IF_ERROR(load_nccl());
  ncclUniqueId nid;
  std::memcpy(nid.internal, id.bytes.data(), NcclId::kBytes);
  ncclComm_t comm = nullptr;
  VPOD_RETURN_IF_ERROR(nccl_status(api().comm_init_rank(&comm, size, nid, rank), "comm_init_rank"));
  return std::unique_ptr<Communicator>(
      std::make_unique<NcclCommunicator>(comm, rank, size, stream));
}

}  // namespace vpod::model
