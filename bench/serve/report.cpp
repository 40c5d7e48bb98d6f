// The end-of-run report (report.h): vLLM's result table and its JSON keys.
#include "bench/serve/report.h"

#include <fmt/format.h>

namespace vpod::bench::serve {
namespace {

using nlohmann::json;

constexpr int kLabelWidth = 40;
constexpr int kRuleWidth = 50;

std::string fmt_p(double p) { return fmt::format("{:g}", p); }

void line(std::string& out, std::string_view label, std::string_view value) {
  fmt::format_to(std::back_inserter(out), "{:<{}}{:<10}\n", label, kLabelWidth, value);
}

void rule(std::string& out, std::string_view title, char fill) {
  const int pad = kRuleWidth - static_cast<int>(title.size());
  const int left = pad / 2;
  out += std::string(std::max(left, 0), fill);
  out += title;
  out += std::string(std::max(pad - left, 0), fill);
  out += '\n';
}

void summary_block(std::string& out, std::string_view title, std::string_view name,
                   const Summary& s) {
  rule(out, title, '-');
  line(out, fmt::format("Mean {} (ms):", name), fmt::format("{:.2f}", s.mean));
  line(out, fmt::format("Median {} (ms):", name), fmt::format("{:.2f}", s.median));
  for (const auto& [p, v] : s.percentiles) {
    line(out, fmt::format("P{} {} (ms):", fmt_p(p), name), fmt::format("{:.2f}", v));
  }
}

void summary_json(json& j, std::string_view name, const Summary& s) {
  j[fmt::format("mean_{}_ms", name)] = s.mean;
  j[fmt::format("median_{}_ms", name)] = s.median;
  j[fmt::format("std_{}_ms", name)] = s.std;
  for (const auto& [p, v] : s.percentiles) j[fmt::format("p{}_{}_ms", fmt_p(p), name)] = v;
}

}  // namespace

std::string format_table(const BenchmarkMetrics& m, int max_concurrency_seen) {
  std::string out;
  rule(out, " Serving Benchmark Result ", '=');
  line(out, "Successful requests:", fmt::format("{}", m.completed));
  if (m.failed > 0) line(out, "Failed requests:", fmt::format("{}", m.failed));
  line(out, "Maximum request concurrency:", fmt::format("{}", max_concurrency_seen));
  line(out, "Benchmark duration (s):", fmt::format("{:.2f}", m.duration_s));
  line(out, "Total input tokens:", fmt::format("{}", m.total_input));
  line(out, "Total generated tokens:", fmt::format("{}", m.total_output));
  line(out, "Request throughput (req/s):", fmt::format("{:.2f}", m.request_throughput));
  if (m.request_goodput) {
    line(out, "Request goodput (req/s):", fmt::format("{:.2f}", *m.request_goodput));
  }
  line(out, "Input token throughput (tok/s):", fmt::format("{:.2f}", m.input_throughput));
  line(out, "Output token throughput (tok/s):", fmt::format("{:.2f}", m.output_throughput));
  line(out, "Total Token throughput (tok/s):", fmt::format("{:.2f}", m.total_token_throughput));
  summary_block(out, "Time to First Token", "TTFT", m.ttft_ms);
  summary_block(out, "Time per Output Token (excl. 1st token)", "TPOT", m.tpot_ms);
  summary_block(out, "Inter-token Latency", "ITL", m.itl_ms);
  summary_block(out, "End-to-end Latency", "E2EL", m.e2el_ms);
  out += std::string(kRuleWidth, '=');
  out += '\n';
  return out;
}

json metrics_json(const BenchmarkMetrics& m, std::span<const RequestResult> results) {
  json j;
  j["duration"] = m.duration_s;
  j["completed"] = m.completed;
  j["failed"] = m.failed;
  j["total_input_tokens"] = m.total_input;
  j["total_output_tokens"] = m.total_output;
  j["request_throughput"] = m.request_throughput;
  j["request_goodput"] = m.request_goodput ? json(*m.request_goodput) : json(nullptr);
  j["input_throughput"] = m.input_throughput;
  j["output_throughput"] = m.output_throughput;
  j["total_token_throughput"] = m.total_token_throughput;
  summary_json(j, "ttft", m.ttft_ms);
  summary_json(j, "tpot", m.tpot_ms);
  summary_json(j, "itl", m.itl_ms);
  summary_json(j, "e2el", m.e2el_ms);
  j["mean_cached_tokens"] = m.mean_cached_tokens ? json(*m.mean_cached_tokens) : json(nullptr);
  j["total_cached_tokens"] = m.num_cached_reported > 0 ? json(m.total_cached) : json(nullptr);
  json input_lens = json::array(), output_lens = json::array(), ttfts = json::array(),
       itls = json::array(), e2els = json::array(), send_times = json::array(),
       errors = json::array(), cached = json::array();
  for (const RequestResult& r : results) {
    cached.push_back(r.success && r.cached_tokens ? json(*r.cached_tokens) : json(nullptr));
    input_lens.push_back(r.prompt_len);
    output_lens.push_back(r.success ? r.output_tokens : 0);
    ttfts.push_back(r.ttft_s);
    itls.push_back(r.itl_s);
    e2els.push_back(r.latency_s);
    send_times.push_back(r.send_time_s);
    errors.push_back(r.error);
  }
  j["input_lens"] = std::move(input_lens);
  j["output_lens"] = std::move(output_lens);
  j["ttfts"] = std::move(ttfts);
  j["itls"] = std::move(itls);
  j["e2els"] = std::move(e2els);
  j["send_times"] = std::move(send_times);
  j["errors"] = std::move(errors);
  j["cached_tokens"] = std::move(cached);
  return j;
}

std::string format_prefix_cache(const std::optional<PrefixCacheDelta>& server,
                                const BenchmarkMetrics& m, bool always) {
  if (!always && !server && !m.mean_cached_tokens) return {};
  std::string out;
  rule(out, "Prefix Cache", '-');
  if (!server) {
    line(out, "Hit rate (server /metrics):", "n/a (no prefix_cache counters)");
  } else if (const auto rate = server->hit_rate()) {
    line(out, "Hit rate (server /metrics):",
         fmt::format("{:.2f}% ({:.0f} of {:.0f} tokens)", *rate * 100.0, server->hits,
                     server->queries));
  } else {
    line(out, "Hit rate (server /metrics):", "n/a (no tokens looked up: caching off?)");
  }
  if (m.mean_cached_tokens) {
    line(out, "Mean cached tokens (usage):", fmt::format("{:.2f}", *m.mean_cached_tokens));
    if (m.total_input_cached_reported > 0) {
      line(out, "Cached share of prompt tokens (usage):",
           fmt::format("{:.2f}%", 100.0 * static_cast<double>(m.total_cached) /
                                      static_cast<double>(m.total_input_cached_reported)));
    }
  } else {
    line(out, "Mean cached tokens (usage):", "n/a (responses report no cached_tokens)");
  }
  out += std::string(kRuleWidth, '=');
  out += '\n';
  return out;
}

json prefix_cache_json(const std::optional<PrefixCacheDelta>& server) {
  if (!server) return nullptr;
  const auto rate = server->hit_rate();
  return {{"prefix", server->prefix},
          {"queries", server->queries},
          {"hits", server->hits},
          {"hit_rate", rate ? json(*rate) : json(nullptr)}};
}

std::string format_turn_table(std::span<const TurnMetrics> turns) {
  std::string out;
  rule(out, "Per-turn TTFT", '-');
  std::string header = fmt::format("{:>4} {:>6} {:>10} {:>10} {:>9} {:>9}", "Turn", "Done",
                                   "Input tok", "Cached tok", "Mean ms", "Median ms");
  if (!turns.empty()) {
    for (const auto& [p, v] : turns.front().ttft_ms.percentiles) {
      header += fmt::format(" {:>9}", fmt::format("P{} ms", fmt_p(p)));
    }
  }
  out += header + "\n";
  for (const TurnMetrics& t : turns) {
    std::string row = fmt::format(
        "{:>4} {:>6} {:>10.1f} {:>10} {:>9.2f} {:>9.2f}", t.turn,
        fmt::format("{}/{}", t.completed, t.completed + t.failed), t.mean_input_tokens,
        t.mean_cached_tokens ? fmt::format("{:.1f}", *t.mean_cached_tokens) : std::string("n/a"),
        t.ttft_ms.mean, t.ttft_ms.median);
    for (const auto& [p, v] : t.ttft_ms.percentiles) row += fmt::format(" {:>9.2f}", v);
    out += row + "\n";
  }
  out += std::string(kRuleWidth, '=');
  out += '\n';
  return out;
}

json turn_metrics_json(std::span<const TurnMetrics> turns) {
  json out = json::array();
  for (const TurnMetrics& t : turns) {
    json j = {
        {"turn", t.turn},
        {"completed", t.completed},
        {"failed", t.failed},
        {"mean_input_tokens", t.mean_input_tokens},
        {"mean_cached_tokens", t.mean_cached_tokens ? json(*t.mean_cached_tokens) : json(nullptr)}};
    summary_json(j, "ttft", t.ttft_ms);
    out.push_back(std::move(j));
  }
  return out;
}

}  // namespace vpod::bench::serve
