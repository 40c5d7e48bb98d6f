#include "bench/serve/sse.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace vpod::bench::serve {
namespace {

std::vector<std::string> parse_in_pieces(std::string_view stream,
                                         const std::vector<std::size_t>& cuts) {
  SseParser parser;
  std::vector<std::string> events;
  std::size_t pos = 0;
  for (std::size_t cut : cuts) {
    parser.feed(stream.substr(pos, cut - pos),
                [&](std::string_view data) { events.emplace_back(data); });
    pos = cut;
  }
  parser.feed(stream.substr(pos), [&](std::string_view data) { events.emplace_back(data); });
  return events;
}

// A stream as an OpenAI-compatible server sends it, with every feature the
// format allows: CRLF, CR and LF endings, comments, multi-line data, a field
// without a space, other fields, an event with no data.
const std::string kStream =
    ": keep-alive comment\r\n"
    "\r\n"
    "data: {\"choices\":[{\"text\":\"a\"}]}\r\n\r\n"
    "event: message\n"
    "id: 7\n"
    "data:{\"choices\":[{\"text\":\"b\\n\"}]}\n\n"
    "data: line one\r"
    "data: line two\r\r"
    "retry: 100\n\n"
    "data:  two spaces keep one\n\n"
    "data\n\n"
    "data: [DONE]\n\n";

const std::vector<std::string> kEvents = {
    "{\"choices\":[{\"text\":\"a\"}]}",
    "{\"choices\":[{\"text\":\"b\\n\"}]}",
    "line one\nline two",
    " two spaces keep one",
    "",
    "[DONE]",
};

TEST(SseParser, ParsesEveryLineEndingAndField) { EXPECT_EQ(parse_in_pieces(kStream, {}), kEvents); }

TEST(SseParser, SameEventsWhereverTheStreamIsSplitOnce) {
  for (std::size_t cut = 0; cut <= kStream.size(); ++cut) {
    EXPECT_EQ(parse_in_pieces(kStream, {cut}), kEvents) << "cut at " << cut;
  }
}

TEST(SseParser, SameEventsWhereverTheStreamIsSplitTwice) {
  for (std::size_t a = 0; a <= kStream.size(); ++a) {
    for (std::size_t b = a; b <= kStream.size(); ++b) {
      ASSERT_EQ(parse_in_pieces(kStream, {a, b}), kEvents) << "cuts at " << a << ", " << b;
    }
  }
}

TEST(SseParser, SameEventsFedByteByByteOrInRandomPieces) {
  std::vector<std::size_t> every;
  for (std::size_t i = 1; i < kStream.size(); ++i) every.push_back(i);
  EXPECT_EQ(parse_in_pieces(kStream, every), kEvents);
  std::mt19937 rng(3);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<std::size_t> cuts;
    for (std::size_t pos = 0;;) {
      pos += std::uniform_int_distribution<std::size_t>(0, 9)(rng);
      if (pos > kStream.size()) break;
      cuts.push_back(pos);
    }
    ASSERT_EQ(parse_in_pieces(kStream, cuts), kEvents) << "trial " << trial;
  }
}

TEST(SseParser, DispatchesOnlyWhenTheBlankLineArrives) {
  SseParser parser;
  std::vector<std::string> events;
  const auto on_event = [&](std::string_view d) { events.emplace_back(d); };
  parser.feed("data: x\n", on_event);
  EXPECT_TRUE(events.empty());
  parser.feed("\n", on_event);
  EXPECT_EQ(events, std::vector<std::string>{"x"});
  // An unterminated event at the end of the stream is never dispatched.
  parser.feed("data: tail\n", on_event);
  EXPECT_EQ(events.size(), 1u);
  EXPECT_EQ(parser.num_events(), 1);
}

TEST(SseParser, SkipsALeadingByteOrderMarkOnly) {
  EXPECT_EQ(parse_in_pieces("\xEF\xBB\xBF"
                            "data: a\n\n",
                            {1, 2}),
            std::vector<std::string>{"a"});
  // Not at the start: the bytes belong to the field name, which is then unknown.
  EXPECT_TRUE(parse_in_pieces("\n\xEF\xBB\xBF"
                              "data: a\n\n",
                              {})
                  .empty());
}

}  // namespace
}  // namespace vpod::bench::serve
