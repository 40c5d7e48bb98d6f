// StopStringMatcher (stop_strings.h): matching stop strings over streamed
// text while holding back what could still become one.
#include "engine/stop_strings.h"

#include <algorithm>
#include <utility>

namespace vpod::engine {

StopStringMatcher::StopStringMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {
  prefix_function_.reserve(stops_.size());
  for (const std::string& s : stops_) {
    // pi[i]: length of the longest proper prefix of s[0..i] that is also its suffix.
    std::vector<int> pi(s.size(), 0);
    for (std::size_t i = 1; i < s.size(); ++i) {
      int k = pi[i - 1];
      while (k > 0 && s[i] != s[k]) k = pi[k - 1];
      if (s[i] == s[k]) ++k;
      pi[i] = k;
    }
    prefix_function_.push_back(std::move(pi));
  }
}

std::optional<StopMatch> StopStringMatcher::find(std::string_view text, std::size_t from) const {
  std::optional<StopMatch> best;
  std::size_t best_len = 0;
  for (std::size_t i = 0; i < stops_.size(); ++i) {
    const std::size_t pos = text.find(stops_[i], from);
    if (pos == std::string_view::npos) continue;
    if (!best || pos < best->pos || (pos == best->pos && stops_[i].size() > best_len)) {
      best = StopMatch{pos, static_cast<int>(i)};
      best_len = stops_[i].size();
    }
  }
  return best;
}

std::size_t StopStringMatcher::holdback(std::string_view text) const {
  std::size_t hold = 0;
  for (std::size_t i = 0; i < stops_.size(); ++i) {
    const std::string& s = stops_[i];
    const std::vector<int>& pi = prefix_function_[i];
    // Only the last |s|-1 bytes can hold a proper prefix of s. Run the KMP
    // automaton over them; the final state is the longest suffix of the text
    // that is a prefix of s (never all of s: the window is shorter than s).
    const std::size_t window = std::min(s.size() - 1, text.size());
    std::size_t k = 0;
    for (char c : text.substr(text.size() - window)) {
      while (k > 0 && s[k] != c) k = pi[k - 1];
      if (s[k] == c) ++k;
    }
    hold = std::max(hold, k);
  }
  return hold;
}

}  // namespace vpod::engine
