// The server-sent events parser (sse.h): bytes in, complete events out.
#include "bench/serve/sse.h"

namespace vpod::bench::serve {
namespace {

constexpr std::string_view kUtf8Bom = "\xEF\xBB\xBF";

}  // namespace

void SseParser::feed(std::string_view bytes, const EventFn& on_event) {
  for (char c : bytes) {
    if (after_cr_) {
      after_cr_ = false;
      if (c == '\n') continue;  // the LF of a CRLF
    }
    if (c == '\r' || c == '\n') {
      after_cr_ = (c == '\r');
      end_line(on_event);
      continue;
    }
    line_.push_back(c);
    if (at_start_ && line_.size() <= kUtf8Bom.size()) {
      if (line_ == kUtf8Bom) {
        line_.clear();
        at_start_ = false;
      } else if (kUtf8Bom.substr(0, line_.size()) != line_) {
        at_start_ = false;
      }
    }
  }
}

void SseParser::end_line(const EventFn& on_event) {
  at_start_ = false;
  if (line_.empty()) {  // blank line: dispatch the event
    if (has_data_) {
      ++num_events_;
      on_event(data_);
    }
    data_.clear();
    has_data_ = false;
    return;
  }
  if (line_.front() != ':') {  // not a comment
    const std::size_t colon = line_.find(':');
    const std::string_view line(line_);
    const std::string_view field = line.substr(0, colon);
    std::string_view value;
    if (colon != std::string_view::npos) {
      value = line.substr(colon + 1);
      if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
    }
    if (field == "data") {
      if (has_data_) data_.push_back('\n');
      data_.append(value);
      has_data_ = true;
    }
  }
  line_.clear();
}

}  // namespace vpod::bench::serve
