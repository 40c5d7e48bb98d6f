// Request parsing (request_parse.h): the OpenAI and vLLM request fields,
// validated strictly into plain structs.
#include "server/request_parse.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "common/json_nesting.h"
#include "common/utf8.h"
#include "server/structured_output_parse.h"

namespace vpod::server {
namespace {

// Ordered, so messages keep their key order (templates may tojson them).
using json = nlohmann::ordered_json;

// A stop string list longer than this is almost surely a client bug; every
// stop string is matched against every new piece of text.
constexpr std::size_t kMaxStopStrings = 64;
constexpr std::size_t kMaxStopTokenIds = 1024;

ApiResult<json> parse_json_object(std::string_view body, const RequestLimits& limits) {
  if (body.empty()) return bad_request("The request body is empty; expected a JSON object");
  if (!utf8::is_valid(body)) return bad_request("The request body is not valid UTF-8");
  if (!json_nesting_within(body, limits.max_json_depth)) {
    return bad_request(
        fmt::format("The request body nests deeper than {} levels", limits.max_json_depth));
  }
  json value;
  try {
    value = json::parse(body.begin(), body.end());
  } catch (const json::exception& e) {  // parse_error, or out_of_range for 1e400
    std::string what = e.what();
    // "[json.exception.parse_error.101] parse error at ..." -> "parse error at ..."
    if (auto pos = what.find("] "); pos != std::string::npos) what = what.substr(pos + 2);
    return bad_request("Malformed JSON: " + what);
  }
  if (!value.is_object()) return bad_request("The request body must be a JSON object");
  return value;
}

// Reads typed fields of one JSON object, keeping the first error. Absent and
// null fields give the fallback, as OpenAI treats them alike.
class Fields {
 public:
  explicit Fields(const json& object) : object_(object) {}

  const json* find(const char* name) const {
    auto it = object_.find(name);
    if (it == object_.end() || it->is_null()) return nullptr;
    return &*it;
  }
  bool has(const char* name) const { return find(name) != nullptr; }

  void fail(ApiError error) {
    if (!error_) error_ = std::move(error);
  }
  void fail_type(const char* name, std::string_view expected, const json& got) {
    fail(bad_request(fmt::format("'{}' must be {}, got {}", name, expected, json_type_name(got)),
                     name));
  }
  const std::optional<ApiError>& error() const { return error_; }

  bool boolean(const char* name, bool fallback) {
    const json* v = find(name);
    if (!v) return fallback;
    if (!v->is_boolean()) {
      fail_type(name, "a boolean", *v);
      return fallback;
    }
    return v->get<bool>();
  }

  std::optional<std::int64_t> integer(const char* name, std::int64_t min, std::int64_t max) {
    const json* v = find(name);
    if (!v) return std::nullopt;
    return integer_value(name, *v, min, max);
  }

  std::optional<std::int64_t> integer_value(const char* name, const json& v, std::int64_t min,
                                            std::int64_t max) {
    if (!v.is_number_integer()) {
      fail_type(name, "an integer", v);
      return std::nullopt;
    }
    if (v.is_number_unsigned() &&
        v.get<std::uint64_t>() > static_cast<std::uint64_t>(std::numeric_limits<int64_t>::max())) {
      fail(bad_request(fmt::format("'{}' must be at most {}", name, max), name));
      return std::nullopt;
    }
    const std::int64_t x = v.get<std::int64_t>();
    if (x < min || x > max) {
      fail(bad_request(range_message(name, min, max, x), name));
      return std::nullopt;
    }
    return x;
  }

  // A finite number in [min, max] (or (min, max] with min_exclusive).
  std::optional<double> number(const char* name, double min, double max,
                               bool min_exclusive = false) {
    const json* v = find(name);
    if (!v) return std::nullopt;
    if (!v->is_number()) {
      fail_type(name, "a number", *v);
      return std::nullopt;
    }
    const double x = v->get<double>();
    const bool below = min_exclusive ? !(x > min) : !(x >= min);
    if (!std::isfinite(x) || below || x > max) {
      fail(bad_request(fmt::format("'{}' must be {} {} and <= {}, got {}", name,
                                   min_exclusive ? ">" : ">=", min, max, x),
                       name));
      return std::nullopt;
    }
    return x;
  }

  std::optional<std::string> string(const char* name) {
    const json* v = find(name);
    if (!v) return std::nullopt;
    if (!v->is_string()) {
      fail_type(name, "a string", *v);
      return std::nullopt;
    }
    return v->get<std::string>();
  }

  // A list of token ids in [0, vocab_size).
  std::vector<std::int32_t> token_ids(const char* name, const json& v, int vocab_size) {
    std::vector<std::int32_t> ids;
    if (!v.is_array()) {
      fail_type(name, "an array of token ids", v);
      return ids;
    }
    ids.reserve(v.size());
    for (const json& x : v) {
      auto id = integer_value(name, x, 0, vocab_size - 1);
      if (!id) return {};
      ids.push_back(static_cast<std::int32_t>(*id));
    }
    return ids;
  }

  // Fields vpod knows but does not implement: a 400 saying so, unless the
  // value is null, false, empty, or the one value that means "off".
  void unsupported(const char* name, std::string_view what) {
    const json* v = find(name);
    if (!v) return;
    if ((v->is_boolean() && !v->get<bool>()) || ((v->is_object() || v->is_array()) && v->empty()))
      return;
    fail(bad_request(fmt::format("'{}' is not supported by vpod ({})", name, what), name));
  }

 private:
  static std::string range_message(const char* name, std::int64_t min, std::int64_t max,
                                   std::int64_t got) {
    if (max == std::numeric_limits<std::int64_t>::max()) {
      return fmt::format("'{}' must be >= {}, got {}", name, min, got);
    }
    return fmt::format("'{}' must be between {} and {}, got {}", name, min, max, got);
  }

  const json& object_;
  std::optional<ApiError> error_;
};

std::string model_field(Fields& f) { return f.string("model").value_or(""); }

// OpenAI's logit_bias: {"<token id>": bias in [-100, 100], ...}. Keys are
// decimal token ids in [0, vocab_size) (vLLM: int(key)); a repeated id keeps
// the last value, as a Python dict would.
void parse_logit_bias(Fields& f, const json& v, const RequestLimits& limits,
                      std::vector<kernels::LogitBias>& out) {
  constexpr const char* kName = "logit_bias";
  if (!v.is_object()) {
    f.fail_type(kName, "an object mapping token ids to biases", v);
    return;
  }
  if (v.size() > static_cast<std::size_t>(engine::kMaxLogitBiasEntries)) {
    f.fail(bad_request(fmt::format("'logit_bias' may hold at most {} entries, got {}",
                                   engine::kMaxLogitBiasEntries, v.size()),
                       kName));
    return;
  }
  out.reserve(v.size());
  for (const auto& [key, value] : v.items()) {
    // Decimal digits only (an optional leading '+' or '-' is what int() takes;
    // a '-' id is out of range anyway).
    std::int64_t id = -1;
    const char* first = key.data();
    const char* last = key.data() + key.size();
    if (first != last && *first == '+') ++first;
    const auto [end, ec] = std::from_chars(first, last, id);
    if (key.empty() || ec != std::errc() || end != last) {
      f.fail(bad_request(
          fmt::format("'logit_bias' keys must be token ids (integers), got \"{}\"", key), kName));
      return;
    }
    if (id < 0 || id >= limits.vocab_size) {
      f.fail(bad_request(fmt::format("'logit_bias' token id {} is outside the vocabulary [0, {})",
                                     id, limits.vocab_size),
                         kName));
      return;
    }
    if (!value.is_number()) {
      f.fail(bad_request(fmt::format("'logit_bias' value of token {} must be a number, got {}", id,
                                     json_type_name(value)),
                         kName));
      return;
    }
    const double bias = value.get<double>();
    if (!(std::fabs(bias) <= engine::kMaxAbsLogitBias)) {
      f.fail(bad_request(
          fmt::format("'logit_bias' value of token {} must be in [-100, 100], got {}", id, bias),
          kName));
      return;
    }
    const auto token = static_cast<std::int32_t>(id);
    auto same = std::find_if(out.begin(), out.end(),
                             [&](const kernels::LogitBias& b) { return b.token == token; });
    if (same != out.end()) {
      same->bias = static_cast<float>(bias);
    } else {
      out.push_back({token, static_cast<float>(bias)});
    }
  }
}

// Sampling fields shared by completions and chat, besides max_tokens. A field
// the request leaves out gets the engine's default (SamplingParams and
// StopParams as default-constructed), the same defaults `vpod generate` uses.
void parse_sampling(Fields& f, const RequestLimits& limits, engine::SamplingParams& s,
                    engine::StopParams& stop_params) {
  const engine::SamplingParams& d = limits.sampling_defaults;
  s.temperature = static_cast<float>(f.number("temperature", 0.0, 2.0).value_or(d.temperature));
  s.top_p =
      static_cast<float>(f.number("top_p", 0.0, 1.0, /*min_exclusive=*/true).value_or(d.top_p));
  // vLLM: -1 (or 0) disables top-k.
  s.top_k = static_cast<int>(std::max<std::int64_t>(
      0, f.integer("top_k", -1, std::numeric_limits<int>::max()).value_or(d.top_k)));
  s.min_p = static_cast<float>(f.number("min_p", 0.0, 1.0).value_or(d.min_p));
  s.repetition_penalty = static_cast<float>(
      f.number("repetition_penalty", 0.0, std::numeric_limits<float>::max(), true)
          .value_or(d.repetition_penalty));
  s.presence_penalty =
      static_cast<float>(f.number("presence_penalty", -2.0, 2.0).value_or(d.presence_penalty));
  s.frequency_penalty =
      static_cast<float>(f.number("frequency_penalty", -2.0, 2.0).value_or(d.frequency_penalty));

  if (const json* seed = f.find("seed")) {
    if (!seed->is_number_integer()) {
      f.fail_type("seed", "an integer", *seed);
    } else if (seed->is_number_unsigned()) {
      s.seed = seed->get<std::uint64_t>();
    } else {
      s.seed = static_cast<std::uint64_t>(seed->get<std::int64_t>());
    }
  }

  std::vector<std::string>& stops = stop_params.stop;
  if (const json* stop = f.find("stop")) {
    if (stop->is_string()) {
      stops.push_back(stop->get<std::string>());
    } else if (stop->is_array()) {
      for (const json& x : *stop) {
        if (!x.is_string()) {
          f.fail_type("stop", "a string or an array of strings", x);
          break;
        }
        stops.push_back(x.get<std::string>());
      }
    } else {
      f.fail_type("stop", "a string or an array of strings", *stop);
    }
    if (stops.size() > kMaxStopStrings) {
      f.fail(
          bad_request(fmt::format("'stop' may hold at most {} strings", kMaxStopStrings), "stop"));
    }
    for (const std::string& x : stops) {
      if (x.empty()) f.fail(bad_request("'stop' strings must not be empty", "stop"));
    }
  }
  if (const json* ids = f.find("stop_token_ids")) {
    stop_params.stop_token_ids = f.token_ids("stop_token_ids", *ids, limits.vocab_size);
    if (stop_params.stop_token_ids.size() > kMaxStopTokenIds) {
      f.fail(bad_request(fmt::format("'stop_token_ids' may hold at most {} ids", kMaxStopTokenIds),
                         "stop_token_ids"));
    }
  }
  const engine::StopParams stop_defaults;
  stop_params.ignore_eos = f.boolean("ignore_eos", stop_defaults.ignore_eos);
  stop_params.skip_special_tokens =
      f.boolean("skip_special_tokens", stop_defaults.skip_special_tokens);
  stop_params.include_stop_str_in_output =
      f.boolean("include_stop_str_in_output", stop_defaults.include_stop_str_in_output);

  if (const json* bias = f.find("logit_bias")) parse_logit_bias(f, *bias, limits, s.logit_bias);

  f.string("user");  // type-checked, otherwise unused
  f.unsupported("use_beam_search", "beam search");
  if (auto n = f.integer("prompt_logprobs", 0, limits.max_logprobs)) {
    s.prompt_logprobs = static_cast<int>(*n);
  }
  f.unsupported("allowed_token_ids", "allowed token ids");
  f.unsupported("bad_words", "bad words");
  f.unsupported("logits_processors", "logits processors");
}

// response_format, structured_outputs, guided_* (structured_output_parse.h).
void parse_constraint(Fields& f, const json& body, grammar::Constraint& constraint) {
  auto parsed = parse_structured_output(body);
  if (!parsed.ok()) {
    f.fail(parsed.error());
    return;
  }
  constraint = std::move(parsed).value();
}

void parse_output(Fields& f, const RequestLimits& limits, OutputOptions& o) {
  o.n = static_cast<int>(f.integer("n", 1, limits.max_n).value_or(1));
  if (auto best_of = f.integer("best_of", 1, limits.max_n); best_of && *best_of != o.n) {
    f.fail(bad_request("'best_of' other than n is not supported by vpod", "best_of"));
  }
  o.stream = f.boolean("stream", false);
  if (const json* options = f.find("stream_options")) {
    if (!options->is_object()) {
      f.fail_type("stream_options", "an object", *options);
    } else if (!o.stream) {
      f.fail(
          bad_request("'stream_options' is only allowed when 'stream' is true", "stream_options"));
    } else {
      Fields of(*options);
      o.include_usage = of.boolean("include_usage", false);
      const bool continuous = of.boolean("continuous_usage_stats", false);
      o.continuous_usage = o.include_usage && continuous;  // as vLLM ties them
      if (of.error()) f.fail(*of.error());
    }
  }
  o.return_token_ids = f.boolean("return_token_ids", false);
}

// vLLM's cache_salt: requests share cached prompt blocks only under equal
// salts. Like vLLM, a given salt must be a non-empty string (null: none).
std::string parse_cache_salt(Fields& f) {
  const json* v = f.find("cache_salt");
  if (!v) return {};
  if (!v->is_string() || v->get_ref<const std::string&>().empty()) {
    f.fail(bad_request(fmt::format("'cache_salt' must be a non-empty string, got {}",
                                   v->is_string() ? "an empty string" : json_type_name(*v)),
                       "cache_salt"));
    return {};
  }
  return v->get<std::string>();
}

// max_tokens (>= `least`) and min_tokens, which must not exceed it.
void parse_lengths(Fields& f, const char* max_name, const RequestLimits& limits,
                   std::optional<int>& max_tokens, int& min_tokens, int least = 1) {
  if (auto m = f.integer(max_name, least, limits.max_model_len)) max_tokens = static_cast<int>(*m);
  min_tokens = static_cast<int>(f.integer("min_tokens", 0, limits.max_model_len).value_or(0));
  if (max_tokens && min_tokens > *max_tokens) {
    f.fail(bad_request(fmt::format("'min_tokens' ({}) must not exceed '{}' ({})", min_tokens,
                                   max_name, *max_tokens),
                       "min_tokens"));
  }
}

// vLLM's prompt_logprobs field is reported as asked, in the whole response
// only (as vLLM: not when streaming).
void prompt_logprobs_output(Fields& f, const engine::SamplingParams& s, OutputOptions& output) {
  if (!s.prompt_logprobs) return;
  if (output.stream) {
    f.fail(bad_request("'prompt_logprobs' are not available when 'stream' is true",
                       "prompt_logprobs"));
  }
  output.prompt_logprobs = s.prompt_logprobs;
}

ApiResult<Prompt> parse_one_prompt(Fields& f, const json& v, const RequestLimits& limits) {
  Prompt p;
  if (v.is_string()) {
    p.text = v.get<std::string>();
    if (p.text.empty()) return bad_request("'prompt' must not be empty", "prompt");
    return p;
  }
  p.is_token_ids = true;
  p.token_ids = f.token_ids("prompt", v, limits.vocab_size);
  if (f.error()) return *f.error();
  if (p.token_ids.empty()) return bad_request("'prompt' must not be empty", "prompt");
  return p;
}

// `prompt`: a string, a list of strings, a list of ids, or a list of id lists.
ApiResult<std::vector<Prompt>> parse_prompts(Fields& f, const RequestLimits& limits) {
  const json* v = f.find("prompt");
  if (!v) return bad_request("'prompt' is required", "prompt");
  std::vector<Prompt> prompts;
  if (v->is_string()) {
    auto p = parse_one_prompt(f, *v, limits);
    if (!p.ok()) return p.error();
    prompts.push_back(std::move(p).value());
    return prompts;
  }
  if (!v->is_array()) {
    f.fail_type("prompt", "a string, an array of strings, or an array of token ids", *v);
    return *f.error();
  }
  if (v->empty()) return bad_request("'prompt' must not be empty", "prompt");
  const json& first = v->front();
  if (first.is_number_integer()) {  // one prompt of token ids
    auto p = parse_one_prompt(f, *v, limits);
    if (!p.ok()) return p.error();
    prompts.push_back(std::move(p).value());
    return prompts;
  }
  if (v->size() > static_cast<std::size_t>(limits.max_prompts)) {
    return bad_request(fmt::format("'prompt' may hold at most {} prompts", limits.max_prompts),
                       "prompt");
  }
  if (!first.is_string() && !first.is_array()) {
    f.fail_type("prompt", "a string, an array of strings, or an array of token ids", first);
    return *f.error();
  }
  const bool strings = first.is_string();
  for (const json& x : *v) {
    if (strings ? !x.is_string() : !x.is_array()) {
      f.fail_type("prompt",
                  strings ? "an array of strings (mixed types given)"
                          : "an array of token id arrays (mixed types given)",
                  x);
      return *f.error();
    }
    auto p = parse_one_prompt(f, x, limits);
    if (!p.ok()) return p.error();
    prompts.push_back(std::move(p).value());
  }
  return prompts;
}

constexpr std::string_view kRoles[] = {"system", "user", "assistant", "tool", "developer"};

// An assistant message's earlier `tool_calls` (a conversation that replays
// them): [{"id", "type": "function",
// "function": {"name", "arguments"}}]. As vLLM does, a string `arguments`
// is parsed into its JSON value first, so templates that `tojson` it render
// the object rather than a quoted string.
ApiResult<json> parse_tool_calls(const json& calls, const std::string& where) {
  const auto bad = [&](std::string_view what) {
    return bad_request(fmt::format("'{}.tool_calls' {}", where, what), "messages");
  };
  if (!calls.is_array()) return bad("must be an array");
  json out = json::array();
  for (const json& call : calls) {
    if (!call.is_object()) return bad("must hold objects");
    auto type = call.find("type");
    if (type != call.end() && !type->is_null() && *type != "function") {
      return bad("entries must have type 'function'");
    }
    auto function = call.find("function");
    if (function == call.end() || !function->is_object()) return bad("entries need a 'function'");
    auto name = function->find("name");
    if (name == function->end() || !name->is_string()) return bad("functions need a string 'name'");
    json converted = {{"name", *name}};
    if (auto args = function->find("arguments"); args != function->end() && !args->is_null()) {
      if (args->is_string()) {
        const std::string& text = args->get_ref<const std::string&>();
        // The body's nesting limit held for the string, not for what it holds.
        if (!json_nesting_within(text, RequestLimits{}.max_json_depth)) {
          return bad("'arguments' nests too deeply");
        }
        json value = json::parse(text, nullptr, /*allow_exceptions=*/false);
        if (value.is_discarded()) return bad("'arguments' is not valid JSON");
        converted["arguments"] = std::move(value);
      } else if (args->is_object()) {
        converted["arguments"] = *args;
      } else {
        return bad("'arguments' must be a JSON string or an object");
      }
    } else {
      converted["arguments"] = json::object();
    }
    json entry = json::object();
    if (auto id = call.find("id"); id != call.end() && !id->is_null()) {
      if (!id->is_string()) return bad("ids must be strings");
      entry["id"] = *id;
    }
    entry["type"] = "function";
    entry["function"] = std::move(converted);
    out.push_back(std::move(entry));
  }
  return out;
}

// `messages`: objects with a role and string, text-part or (assistant) null
// content. Returns clean copies for the chat template: role, content (string
// or [{"type": "text", "text"}] parts; null becomes ""), and name if given.
ApiResult<json> parse_messages(const json& v) {
  if (!v.is_array()) {
    return bad_request(fmt::format("'messages' must be an array, got {}", json_type_name(v)),
                       "messages");
  }
  if (v.empty()) return bad_request("'messages' must not be empty", "messages");
  json messages = json::array();
  for (std::size_t i = 0; i < v.size(); ++i) {
    const json& m = v[i];
    const std::string where = fmt::format("messages[{}]", i);
    if (!m.is_object()) {
      return bad_request(fmt::format("'{}' must be an object, got {}", where, json_type_name(m)),
                         "messages");
    }
    auto role = m.find("role");
    if (role == m.end() || !role->is_string()) {
      return bad_request(fmt::format("'{}.role' must be a string", where), "messages");
    }
    const std::string role_name = role->get<std::string>();
    bool known = false;
    for (std::string_view r : kRoles) known = known || role_name == r;
    if (!known) {
      return bad_request(fmt::format("'{}.role' must be one of system, user, assistant, tool, "
                                     "developer; got '{}'",
                                     where, role_name),
                         "messages");
    }
    json message = {{"role", role_name}};
    auto content = m.find("content");
    if (content == m.end() || content->is_null()) {
      if (role_name != "assistant") {
        return bad_request(fmt::format("'{}.content' is required", where), "messages");
      }
      message["content"] = "";
    } else if (content->is_string()) {
      message["content"] = *content;
    } else if (content->is_array()) {
      json parts = json::array();
      for (const json& part : *content) {
        if (!part.is_object() || !part.contains("type") || !part["type"].is_string()) {
          return bad_request(fmt::format("'{}.content' parts must be objects with a 'type'", where),
                             "messages");
        }
        const std::string type = part["type"].get<std::string>();
        if (type != "text") {
          return bad_request(fmt::format("'{}.content' part type '{}' is not supported by vpod "
                                         "(only 'text')",
                                         where, type),
                             "messages");
        }
        if (!part.contains("text") || !part["text"].is_string()) {
          return bad_request(fmt::format("'{}.content' text parts need a string 'text'", where),
                             "messages");
        }
        parts.push_back({{"type", "text"}, {"text", part["text"]}});
      }
      message["content"] = std::move(parts);
    } else {
      return bad_request(fmt::format("'{}.content' must be a string or an array of text parts, "
                                     "got {}",
                                     where, json_type_name(*content)),
                         "messages");
    }
    if (auto name = m.find("name"); name != m.end() && !name->is_null()) {
      if (!name->is_string()) {
        return bad_request(fmt::format("'{}.name' must be a string", where), "messages");
      }
      message["name"] = *name;
    }
    if (auto calls = m.find("tool_calls"); calls != m.end() && !calls->is_null()) {
      if (role_name != "assistant") {
        return bad_request(fmt::format("'{}.tool_calls' is only for assistant messages", where),
                           "messages");
      }
      auto converted = parse_tool_calls(*calls, where);
      if (!converted.ok()) return converted.error();
      if (!converted->empty()) message["tool_calls"] = std::move(converted).value();
    }
    if (auto id = m.find("tool_call_id"); id != m.end() && !id->is_null()) {
      if (!id->is_string()) {
        return bad_request(fmt::format("'{}.tool_call_id' must be a string", where), "messages");
      }
      message["tool_call_id"] = *id;
    }
    messages.push_back(std::move(message));
  }
  return messages;
}

void parse_template_options(Fields& f, ChatTemplateOptions& options) {
  options.add_generation_prompt = f.boolean("add_generation_prompt", true);
  options.continue_final_message = f.boolean("continue_final_message", false);
  if (options.add_generation_prompt && options.continue_final_message) {
    f.fail(bad_request("'continue_final_message' and 'add_generation_prompt' cannot both be true",
                       "continue_final_message"));
  }
  f.unsupported("chat_template", "custom chat templates");
  f.unsupported("documents", "documents");
  if (const json* kwargs = f.find("chat_template_kwargs")) {
    if (!kwargs->is_object()) {
      f.fail_type("chat_template_kwargs", "an object", *kwargs);
    } else {
      options.extra_vars = *kwargs;
    }
  }
}

}  // namespace

ApiResult<CompletionRequest> parse_completion_request(std::string_view body,
                                                      const RequestLimits& limits) {
  auto parsed = parse_json_object(body, limits);
  if (!parsed.ok()) return parsed.error();
  const json& j = parsed.value();
  Fields f(j);
  CompletionRequest r;
  r.model = model_field(f);
  auto prompts = parse_prompts(f, limits);
  if (!prompts.ok()) return prompts.error();
  r.prompts = std::move(prompts).value();

  std::optional<int> max_tokens;
  // 0 only scores the prompt (echo with logprobs, or prompt_logprobs): checked below.
  parse_lengths(f, "max_tokens", limits, max_tokens, r.stop.min_tokens, /*least=*/0);
  r.stop.max_tokens = max_tokens.value_or(16);
  if (!max_tokens && r.stop.min_tokens > r.stop.max_tokens) {
    f.fail(bad_request("'min_tokens' must not exceed 'max_tokens' (16 by default)", "min_tokens"));
  }
  parse_sampling(f, limits, r.sampling, r.stop);
  parse_constraint(f, j, r.constraint);
  parse_output(f, limits, r.output);
  r.cache_salt = parse_cache_salt(f);
  if (auto logprobs = f.integer("logprobs", 0, limits.max_logprobs)) {
    r.sampling.logprobs = static_cast<int>(*logprobs);
  }
  prompt_logprobs_output(f, r.sampling, r.output);
  r.echo = f.boolean("echo", false);
  // echo + logprobs reports the prompt tokens' logprobs first (OpenAI's
  // legacy scoring, lm-eval's loglikelihood): the engine scores the prompt
  // with the larger of the two top-N counts.
  if (r.echo && r.sampling.logprobs) {
    r.echo_logprobs = true;
    r.sampling.prompt_logprobs =
        std::max(r.sampling.prompt_logprobs.value_or(0), *r.sampling.logprobs);
  }
  if (max_tokens == 0 && !r.sampling.prompt_logprobs) {
    f.fail(
        bad_request("'max_tokens' must be at least 1 (0 only scores the prompt: with 'echo' and "
                    "'logprobs', or 'prompt_logprobs')",
                    "max_tokens"));
  }
  r.add_special_tokens = f.boolean("add_special_tokens", true);
  if (const json* suffix = f.find("suffix");
      suffix && !(suffix->is_string() && suffix->get<std::string>().empty())) {
    f.fail(bad_request("'suffix' is not supported by vpod", "suffix"));
  }
  if (f.error()) return *f.error();
  if (static_cast<std::size_t>(r.output.n) * r.prompts.size() >
      static_cast<std::size_t>(limits.max_prompts)) {
    return bad_request(
        fmt::format("n times the number of prompts must not exceed {}", limits.max_prompts), "n");
  }
  return r;
}

ApiResult<ChatRequest> parse_chat_request(std::string_view body, const RequestLimits& limits) {
  auto parsed = parse_json_object(body, limits);
  if (!parsed.ok()) return parsed.error();
  const json& j = parsed.value();
  Fields f(j);
  ChatRequest r;
  r.model = model_field(f);
  const json* messages = f.find("messages");
  if (!messages) return bad_request("'messages' is required", "messages");
  auto parsed_messages = parse_messages(*messages);
  if (!parsed_messages.ok()) return parsed_messages.error();
  r.messages = std::move(parsed_messages).value();

  // max_completion_tokens supersedes the deprecated max_tokens.
  const char* max_name = f.has("max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  parse_lengths(f, max_name, limits, r.max_tokens, r.stop.min_tokens);
  parse_sampling(f, limits, r.sampling, r.stop);
  parse_constraint(f, j, r.constraint);
  parse_output(f, limits, r.output);
  prompt_logprobs_output(f, r.sampling, r.output);
  r.cache_salt = parse_cache_salt(f);
  const bool logprobs = f.boolean("logprobs", false);
  auto top = f.integer("top_logprobs", 0, limits.max_logprobs);
  if (top && !logprobs) {
    f.fail(bad_request("'top_logprobs' requires 'logprobs' to be true", "top_logprobs"));
  }
  if (logprobs) r.sampling.logprobs = static_cast<int>(top.value_or(0));
  parse_template_options(f, r.chat_template);
  r.add_special_tokens = f.boolean("add_special_tokens", false);
  f.unsupported("echo", "echo in chat");
  f.unsupported("functions", "the deprecated function calling; use 'tools'");
  f.unsupported("function_call", "the deprecated function calling; use 'tool_choice'");
  if (f.error()) return *f.error();
  auto tools = parse_tool_request(j);
  if (!tools.ok()) return tools.error();
  r.tools = std::move(tools).value();
  r.chat_template.tools = r.tools.tools;
  return r;
}

ApiResult<TokenizeRequest> parse_tokenize_request(std::string_view body,
                                                  const RequestLimits& limits) {
  auto parsed = parse_json_object(body, limits);
  if (!parsed.ok()) return parsed.error();
  const json& j = parsed.value();
  Fields f(j);
  TokenizeRequest r;
  r.model = model_field(f);
  const bool has_prompt = f.has("prompt");
  const json* messages = f.find("messages");
  if (has_prompt == (messages != nullptr)) {
    return bad_request("Give exactly one of 'prompt' and 'messages'",
                       has_prompt ? "messages" : "prompt");
  }
  if (messages) {
    r.is_chat = true;
    auto parsed_messages = parse_messages(*messages);
    if (!parsed_messages.ok()) return parsed_messages.error();
    r.messages = std::move(parsed_messages).value();
    parse_template_options(f, r.chat_template);
    auto tools = parse_tool_request(j);
    if (!tools.ok()) return tools.error();
    r.chat_template.tools = std::move(tools)->tools;
  } else {
    r.prompt = f.string("prompt").value_or("");
  }
  r.add_special_tokens = f.boolean("add_special_tokens", !r.is_chat);
  r.return_token_strs = f.boolean("return_token_strs", false);
  if (f.error()) return *f.error();
  return r;
}

ApiResult<DetokenizeRequest> parse_detokenize_request(std::string_view body,
                                                      const RequestLimits& limits) {
  auto parsed = parse_json_object(body, limits);
  if (!parsed.ok()) return parsed.error();
  const json& j = parsed.value();
  Fields f(j);
  DetokenizeRequest r;
  r.model = model_field(f);
  const json* tokens = f.find("tokens");
  if (!tokens) return bad_request("'tokens' is required", "tokens");
  r.tokens = f.token_ids("tokens", *tokens, limits.vocab_size);
  if (f.error()) return *f.error();
  return r;
}

ApiResult<json> parse_request_object(std::string_view body, const RequestLimits& limits) {
  return parse_json_object(body, limits);
}

}  // namespace vpod::server
