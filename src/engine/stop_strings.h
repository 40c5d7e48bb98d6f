// Stop-string matching over streamed text. Stop strings can straddle token
// boundaries, so the stream holds back the longest suffix of the unsent text
// that is a proper prefix of some stop string; everything before it can never
// become part of a stop and is safe to send.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace vpod::engine {

struct StopMatch {
  std::size_t pos = 0;  // byte offset of the stop string in the searched text
  int index = 0;        // which stop string
};

class StopStringMatcher {
 public:
  StopStringMatcher() = default;
  explicit StopStringMatcher(std::vector<std::string> stops);

  bool empty() const { return stops_.empty(); }
  const std::string& operator[](int i) const { return stops_[i]; }

  // The earliest occurrence of any stop string in text[from, end); on a tie,
  // the longer string.
  std::optional<StopMatch> find(std::string_view text, std::size_t from) const;

  // Length of the longest suffix of `text` that is a proper prefix of a stop
  // string: the bytes to hold back. O(total stop bytes) per call (a KMP pass
  // over the last |s|-1 bytes for each s), whatever the text.
  std::size_t holdback(std::string_view text) const;

 private:
  std::vector<std::string> stops_;
  std::vector<std::vector<int>> prefix_function_;  // KMP failure table of each stop string
};

}  // namespace vpod::engine
