// Regular expressions on PCRE2 (regex.h): translating Oniguruma patterns,
// compiling with JIT, and finding matches as the onig crate does.

#include "tokenizer/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <fmt/format.h>

#include "common/utf8.h"

namespace vpod::tokenizer {
namespace {

// The JIT stack grows on demand up to this size; patterns in tokenizer.json
// files need a few KiB, pathological inputs more.
constexpr std::size_t kJitStackStart = 32 * 1024;
constexpr std::size_t kJitStackMax = 8 * 1024 * 1024;

// Per-thread match state: PCRE2 match data and the JIT stack are not
// shareable between threads, compiled patterns are.
struct ThreadMatchState {
  pcre2_match_data* match_data = nullptr;
  pcre2_match_context* context = nullptr;
  pcre2_jit_stack* jit_stack = nullptr;

  ThreadMatchState() {
    match_data = pcre2_match_data_create(1, nullptr);
    context = pcre2_match_context_create(nullptr);
    jit_stack = pcre2_jit_stack_create(kJitStackStart, kJitStackMax, nullptr);
    VPOD_CHECK(match_data != nullptr && context != nullptr && jit_stack != nullptr);
    pcre2_jit_stack_assign(context, nullptr, jit_stack);
  }
  ~ThreadMatchState() {
    pcre2_jit_stack_free(jit_stack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(match_data);
  }
  ThreadMatchState(const ThreadMatchState&) = delete;
  ThreadMatchState& operator=(const ThreadMatchState&) = delete;
};

ThreadMatchState& thread_match_state() {
  thread_local ThreadMatchState state;
  return state;
}

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof(buffer));
  return reinterpret_cast<const char*>(buffer);
}

}  // namespace

struct Regex::Code {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Code() { pcre2_code_free(code); }
};

Result<std::string> translate_oniguruma_pattern(std::string_view pattern) {
  // Inside a character class the replacement must not bring brackets.
  constexpr std::string_view kSpace = "\\p{White_Space}";
  constexpr std::string_view kNotSpace = "\\P{White_Space}";
  constexpr std::string_view kWordItems = "\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}";
  constexpr std::string_view kHexItems = "0-9a-fA-F";
  std::string out;
  out.reserve(pattern.size() + 32);
  int class_depth = 0;
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char e = pattern[++i];
      const bool in_class = class_depth > 0;
      switch (e) {
        case 's': out += kSpace; break;
        case 'S': out += kNotSpace; break;
        case 'w':
          if (in_class) {
            out += kWordItems;
          } else {
            out += '[';
            out += kWordItems;
            out += ']';
          }
          break;
        case 'W':
          if (in_class) return unimplemented("\\W inside a character class");
          out += "[^";
          out += kWordItems;
          out += ']';
          break;
        case 'h':
          if (in_class) {
            out += kHexItems;
          } else {
            out += '[';
            out += kHexItems;
            out += ']';
          }
          break;
        case 'H':
          if (in_class) return unimplemented("\\H inside a character class");
          out += "[^";
          out += kHexItems;
          out += ']';
          break;
        default:
          out += c;
          out += e;
          break;
      }
      continue;
    }
    if (c == '[') {
      out += c;
      // "[]" and "[^]" start a class whose first member is "]".
      if (class_depth == 0) {
        if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
        if (i + 1 < pattern.size() && pattern[i + 1] == ']') out += pattern[++i];
      }
      ++class_depth;
      continue;
    }
    if (c == ']' && class_depth > 0) {
      --class_depth;
      out += c;
      continue;
    }
    out += c;
  }
  return out;
}

Result<Regex> Regex::compile(std::string_view pattern) {
  VPOD_ASSIGN_OR_RETURN(std::string translated, translate_oniguruma_pattern(pattern));
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  pcre2_code* code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                    PCRE2_UTF | PCRE2_UCP, &error_code, &error_offset, nullptr);
  if (code == nullptr) {
    return invalid_argument(fmt::format("regex /{}/: {} at offset {}", pattern,
                                        pcre2_message(error_code), error_offset));
  }
  auto owned = std::make_shared<Code>();
  owned->code = code;
  owned->jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  Regex regex;
  regex.code_ = std::move(owned);
  regex.pattern_ = std::string(pattern);
  return regex;
}

Result<Regex> Regex::literal(std::string_view text) {
  // \Q...\E quotes everything except a literal "\E", which we split around.
  std::string quoted;
  std::size_t pos = 0;
  while (true) {
    const std::size_t e = text.find("\\E", pos);
    quoted += "\\Q";
    quoted += text.substr(pos, e == std::string_view::npos ? text.npos : e - pos);
    quoted += "\\E";
    if (e == std::string_view::npos) break;
    quoted += "\\\\E";
    pos = e + 2;
  }
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(quoted.data()), quoted.size(),
                                   PCRE2_UTF | PCRE2_UCP, &error_code, &error_offset, nullptr);
  if (code == nullptr) {
    return invalid_argument(
        fmt::format("literal pattern '{}': {}", text, pcre2_message(error_code)));
  }
  auto owned = std::make_shared<Code>();
  owned->code = code;
  owned->jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  Regex regex;
  regex.code_ = std::move(owned);
  regex.pattern_ = std::string(text);
  regex.is_literal_ = true;
  return regex;
}

Result<bool> Regex::search(std::string_view text, std::size_t from, std::size_t* begin,
                           std::size_t* end) const {
  ThreadMatchState& state = thread_match_state();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  int rc;
  if (code_->jit) {
    rc = pcre2_jit_match(code_->code, subject, text.size(), from, PCRE2_NO_UTF_CHECK,
                         state.match_data, state.context);
  } else {
    rc = pcre2_match(code_->code, subject, text.size(), from, PCRE2_NO_UTF_CHECK, state.match_data,
                     state.context);
  }
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  if (rc < 0) {
    return resource_exhausted(fmt::format("regex /{}/: {}", pattern_, pcre2_message(rc)));
  }
  const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(state.match_data);
  *begin = ovector[0];
  *end = ovector[1];
  return true;
}

Status Regex::find_matches(std::string_view text, std::vector<MatchSpan>& out) const {
  if (text.empty()) {
    out.push_back({0, 0, false});
    return {};
  }
  if (is_literal_) {
    // Leftmost non-overlapping occurrences, as the escaped regex would give.
    std::size_t previous_end = 0;
    std::size_t at = pattern_.empty() ? text.npos : text.find(pattern_);
    while (at != text.npos) {
      if (at > previous_end) {
        out.push_back(
            {static_cast<std::uint32_t>(previous_end), static_cast<std::uint32_t>(at), false});
      }
      previous_end = at + pattern_.size();
      out.push_back(
          {static_cast<std::uint32_t>(at), static_cast<std::uint32_t>(previous_end), true});
      at = text.find(pattern_, previous_end);
    }
    if (previous_end < text.size()) {
      out.push_back({static_cast<std::uint32_t>(previous_end),
                     static_cast<std::uint32_t>(text.size()), false});
    }
    return {};
  }
  // Oniguruma's find_iter: after an empty match at the end of the previous
  // match, move on by one character instead of returning it again.
  std::size_t search_from = 0;
  std::size_t previous_end = 0;  // end of the last span emitted
  bool have_last_match = false;
  std::size_t last_match_end = 0;
  while (search_from <= text.size()) {
    std::size_t begin = 0, end = 0;
    VPOD_ASSIGN_OR_RETURN(const bool found, search(text, search_from, &begin, &end));
    if (!found) break;
    if (begin == end && have_last_match && last_match_end == end) {
      search_from += search_from < text.size()
                         ? utf8::sequence_length(static_cast<unsigned char>(text[search_from]))
                         : 1;
      continue;
    }
    search_from = end;
    have_last_match = true;
    last_match_end = end;
    if (previous_end != begin) {
      out.push_back(
          {static_cast<std::uint32_t>(previous_end), static_cast<std::uint32_t>(begin), false});
    }
    out.push_back({static_cast<std::uint32_t>(begin), static_cast<std::uint32_t>(end), true});
    previous_end = end;
  }
  if (previous_end != text.size()) {
    out.push_back(
        {static_cast<std::uint32_t>(previous_end), static_cast<std::uint32_t>(text.size()), false});
  }
  return {};
}

}  // namespace vpod::tokenizer
