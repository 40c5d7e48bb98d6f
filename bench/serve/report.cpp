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
  json input_lens = json::array(), output_lens = json::array(), ttfts = json::array(),
       itls = json::array(), e2els = json::array(), send_times = json::array(),
       errors = json::array();
  for (const RequestResult& r : results) {
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
  return j;
}

}  // namespace vpod::bench::serve
