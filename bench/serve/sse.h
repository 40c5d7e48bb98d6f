// Incremental parser for a text/event-stream body (the WHATWG server-sent
// events format that OpenAI-compatible servers stream): bytes go in as the
// socket delivers them, split anywhere, and each complete event's data comes
// out once its terminating blank line has arrived.
//
// Lines end with LF, CRLF or CR (a CRLF split across two feeds is one line
// ending). "data:" lines of one event are joined with '\n'; one space after
// the colon is dropped; comment lines (":...") and other fields are skipped;
// an event without data is not dispatched, and an unterminated event at the
// end of the stream is discarded, as the standard says.
#pragma once

#include <functional>
#include <string>
#include <string_view>

namespace vpod::bench::serve {

class SseParser {
 public:
  using EventFn = std::function<void(std::string_view data)>;

  // Parses `bytes`; calls `on_event` for each event completed by them.
  void feed(std::string_view bytes, const EventFn& on_event);
  // Events dispatched so far.
  long long num_events() const { return num_events_; }

 private:
  void end_line(const EventFn& on_event);

  std::string line_;  // the current line, without its ending
  std::string data_;  // data of the current event, lines joined by '\n'
  bool has_data_ = false;
  bool after_cr_ = false;  // the previous byte was CR: a following LF is part of it
  bool at_start_ = true;   // before the first byte (a UTF-8 BOM there is skipped)
  long long num_events_ = 0;
};

}  // namespace vpod::bench::serve
