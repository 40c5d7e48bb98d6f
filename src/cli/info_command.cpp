// `vpod info`: build info, every GPU's properties, and the backend vpod would use.
#include <fmt/format.h>

#include "cli/commands.h"
#include "cuda/device_info.h"
#include "vpod/build_info.h"

namespace vpod::cli {
namespace {

std::string format_bytes(std::size_t bytes) {
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  constexpr double kMiB = 1024.0 * 1024.0;
  if (bytes >= (std::size_t{1} << 30)) return fmt::format("{:.1f} GiB", bytes / kGiB);
  return fmt::format("{:.0f} MiB", bytes / kMiB);
}

void print_info() {
  fmt::print("vpod {} (commit {}, built {}, {})\n", build_info::version, build_info::git_commit,
             build_info::build_date, build_info::build_type);
  fmt::print("  compilers:   {}, {}\n", build_info::cxx_compiler, build_info::cuda_compiler);
  fmt::print("  CUDA archs:  {}\n", build_info::cuda_archs);
  const auto driver = cuda::driver_version();
  fmt::print("  CUDA driver: {}\n", driver.ok() ? driver.value() : driver.status().message());

  const auto gpus = cuda::query_gpus();
  if (!gpus.ok()) {
    fmt::print("GPUs: none ({})\n", gpus.status().message());
  } else {
    fmt::print("GPUs: {}\n", gpus->size());
    for (const cuda::GpuInfo& gpu : *gpus) {
      fmt::print("  [{}] {}\n", gpu.index, gpu.name);
      fmt::print("      compute capability {}.{}, {} SMs\n", gpu.compute_major, gpu.compute_minor,
                 gpu.sm_count);
      fmt::print(
          "      memory {} total, {} free; L2 {}; shared memory {} KiB per SM, {} KiB "
          "per block\n",
          format_bytes(gpu.total_memory_bytes), format_bytes(gpu.free_memory_bytes),
          format_bytes(gpu.l2_cache_bytes), gpu.shared_memory_per_sm_bytes / 1024,
          gpu.shared_memory_per_block_optin_bytes / 1024);
      if (gpu.vmm_supported) {
        fmt::print("      VMM supported, granularity {} (minimum) / {} (recommended)\n",
                   format_bytes(gpu.vmm_granularity_min_bytes),
                   format_bytes(gpu.vmm_granularity_recommended_bytes));
      } else {
        fmt::print("      VMM not supported\n");
      }
    }
  }
  const auto backend = cuda::choose_backend("auto");
  fmt::print("backend: {}\n", backend.ok() ? backend->reason : backend.status().message());
}

}  // namespace

void add_info_command(CLI::App& app) {
  CLI::App* info = app.add_subcommand("info", "Print build info, the GPUs found and the backend");
  info->callback([] { print_info(); });
}

}  // namespace vpod::cli
