// add_stack_flags: the engine stack's flags, parsed into engine::StackOptions.
#include "cli/stack_flags.h"

#include <fmt/format.h>

#include <cctype>
#include <string_view>

namespace vpod::cli {
namespace {

// An option that parses its value with `parse` (a Result<T>) into `target`;
// a bad value fails the command line with the parser's message.
template <typename T, typename Parse>
CLI::Option* add_parsed(CLI::App& cmd, const std::string& flag, T& target, Parse parse,
                        const std::string& help) {
  return cmd.add_option_function<std::string>(
      flag,
      [&target, parse, flag](const std::string& text) {
        auto parsed = parse(text);
        if (!parsed.ok()) throw CLI::ValidationError(flag, parsed.status().message());
        target = std::move(parsed).value();
      },
      help);
}

Result<bool> parse_on_off(std::string_view text) {
  if (text == "on") return true;
  if (text == "off") return false;
  return invalid_argument(fmt::format("must be on or off, got '{}'", text));
}

}  // namespace

std::optional<std::size_t> parse_size(const std::string& text) {
  std::size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  std::string unit = text.substr(used);
  for (char& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  double scale = 1;
  if (unit == "" || unit == "b") {
    scale = 1;
  } else if (unit == "kib" || unit == "k") {
    scale = 1024.0;
  } else if (unit == "mib" || unit == "m") {
    scale = 1024.0 * 1024;
  } else if (unit == "gib" || unit == "g") {
    scale = 1024.0 * 1024 * 1024;
  } else if (unit == "kb") {
    scale = 1e3;
  } else if (unit == "mb") {
    scale = 1e6;
  } else if (unit == "gb") {
    scale = 1e9;
  } else {
    return std::nullopt;
  }
  if (!(value > 0)) return std::nullopt;
  return static_cast<std::size_t>(value * scale);
}

void add_stack_flags(CLI::App& cmd, engine::StackOptions& o) {
  const auto on_off = [](bool value) { return std::string(value ? "on" : "off"); };
  add_parsed(cmd, "--device", o.device, engine::parse_device_request, "auto, cuda or cpu")
      ->default_str(std::string(engine::device_request_name(o.device)));
  add_parsed(
      cmd, "--dtype", o.dtype,
      [](std::string_view text) -> Result<std::optional<DType>> {
        VPOD_ASSIGN_OR_RETURN(const DType dtype, parse_dtype(text));
        return std::optional<DType>(dtype);
      },
      "GPU compute dtype: bf16, fp16, fp32 (default: the model's)");
  add_parsed(cmd, "--attention", o.attention, engine::parse_attention_choice,
             "serial, simple (serial through the simple exact kernel) or pod (CUDA only)")
      ->default_str(std::string(engine::attention_choice_name(o.attention)));
  cmd.add_option("--cpu-threads", o.cpu_threads,
                 "CPU backend threads, all tensor-parallel ranks together (0: all cores)")
      ->capture_default_str();
  cmd.add_option("--tensor-parallel-size", o.tensor_parallel_size,
                 "Ranks the model is split over (GPUs 0..N-1, or CPU threads)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd.add_option("--nnodes", o.distributed.nnodes, "Hosts of a tensor-parallel group")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd.add_option("--node-rank", o.distributed.node_rank, "This host's index, 0 to --nnodes - 1")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd.add_option("--master-addr", o.distributed.master_addr,
                 "Host of node 0, which serves NCCL's id to the other nodes")
      ->capture_default_str();
  cmd.add_option("--master-port", o.distributed.master_port, "TCP port of --master-addr")
      ->check(CLI::Range(1, 65535))
      ->capture_default_str();
  cmd.add_option("--max-model-len", o.max_model_len,
                 "Prompt + output tokens per request (default: the model's context)");
  cmd.add_option("--max-num-seqs", o.max_num_seqs, "Requests running at once")
      ->capture_default_str();
  cmd.add_option("--max-num-batched-tokens", o.max_num_batched_tokens,
                 "Tokens per engine step (decodes + prefill chunks)")
      ->capture_default_str();
  add_parsed(cmd, "--kv-cache", o.kv_cache, engine::parse_kv_cache_kind, "vattn or paged")
      ->default_str(std::string(engine::kv_cache_kind_name(o.kv_cache)));
  add_parsed(cmd, "--load-format", o.load_format, model::parse_load_format,
             "auto/safetensors: the folder's weights; dummy: make-model's random weights (for the "
             "seed, default 0 as make-model's), made in memory: the folder needs only "
             "config.json and a tokenizer")
      ->default_str(std::string(model::load_format_name(o.load_format)));
  cmd.add_option("--block-size", o.block_size,
                 "Tokens per KV block of --kv-cache paged: 1, 16, 32 or 64 (default 16)");
  add_parsed(cmd, "--kv-layout", o.kv_layout, kvcache::parse_kv_layout,
             "all-layers or per-layer (vattn)")
      ->default_str(std::string(kvcache::kv_layout_name(o.kv_layout)));
  add_parsed(cmd, "--kv-eager-allocation", o.kv_eager_allocation, parse_on_off,
             "vattn: on maps the next admitted request's first chunk while steps run; off "
             "maps it when the request is admitted")
      ->default_str(on_off(o.kv_eager_allocation));
  // vLLM's spelling: --enable-prefix-caching / --no-enable-prefix-caching.
  cmd.add_flag("--enable-prefix-caching,!--no-enable-prefix-caching", o.prefix_caching,
               "Reuse the cached K/V of prompt prefixes seen before (--no-enable-prefix-caching: "
               "off)")
      ->default_str(o.prefix_caching ? "true" : "false");
  cmd.add_option("--gpu-memory-utilization", o.gpu_memory_utilization,
                 "Fraction of GPU memory vpod may use (weights, activations, KV cache)")
      ->capture_default_str();
  add_parsed(
      cmd, "--kv-cache-memory", o.kv_cache_memory_bytes,
      [](std::string_view text) -> Result<std::size_t> {
        const auto bytes = parse_size(std::string(text));
        if (!bytes) return invalid_argument(fmt::format("not a size: {}", text));
        return *bytes;
      },
      "KV cache size, e.g. 4GiB (default: the GPU budget; on the CPU a default)");
  add_parsed(cmd, "--async-scheduling", o.async_scheduling, parse_on_off,
             "on: a step's output work overlaps the next step's forward; off: synchronous")
      ->default_str(on_off(o.async_scheduling));
  add_parsed(cmd, "--structured-outputs-defer-late-masks", o.defer_late_masks, parse_on_off,
             "on (GPU): a decode row whose grammar mask is late when the forward is done sits the "
             "step out; off: every step waits for every mask")
      ->default_str(on_off(o.defer_late_masks));
}

}  // namespace vpod::cli
