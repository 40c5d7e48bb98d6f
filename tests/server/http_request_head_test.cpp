// Request heads: what Beast parses, what vpod refuses on top, and random
// mutations of real heads that must end in a head or a 4xx, never a crash.
#include "server/http_request_head.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace vpod::server {
namespace {

ApiResult<RequestHead> parse(const std::string& head, HttpLimits limits = {}) {
  RequestParser parser;
  return parse_request_head(head, limits, parser);
}

int status_of(const std::string& head, HttpLimits limits = {}) {
  auto r = parse(head, limits);
  return r.ok() ? 200 : r.error().http_status;
}

TEST(RequestHead, ReadsWhatTheConnectionNeeds) {
  auto r = parse(
      "POST /v1/completions?x=1 HTTP/1.1\r\nHost: a\r\nContent-Length: 12\r\n"
      "Authorization: Bearer k\r\nAccept-Encoding: gzip, deflate\r\nExpect: 100-continue\r\n"
      "X-Request-Id: trace-1\r\n\r\n");
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->method, "POST");
  EXPECT_EQ(r->path, "/v1/completions");
  EXPECT_EQ(r->version, 11u);
  EXPECT_TRUE(r->keep_alive);
  EXPECT_TRUE(r->accepts_gzip);
  EXPECT_TRUE(r->expects_continue);
  EXPECT_TRUE(r->has_body);
  EXPECT_EQ(r->authorization, "Bearer k");
  EXPECT_EQ(r->client_request_id, "trace-1");

  auto g = parse("GET /health HTTP/1.0\r\n\r\n");
  ASSERT_TRUE(g.ok());
  EXPECT_FALSE(g->keep_alive);
  EXPECT_FALSE(g->has_body);
  EXPECT_EQ(g->version, 10u);
  EXPECT_TRUE(parse("HEAD /health HTTP/1.1\r\nHost: a\r\n\r\n")->head_only);
  // An id that could inject log lines or headers is not taken.
  EXPECT_EQ(parse("GET / HTTP/1.1\r\nX-Request-Id: a b\r\n\r\n")->client_request_id, "");
  EXPECT_EQ(parse("GET / HTTP/1.1\r\nX-Request-Id: " + std::string(200, 'a') + "\r\n\r\n")
                ->client_request_id,
            "");
}

TEST(RequestHead, AmbiguousFramingIs400) {
  for (const char* headers : {
           "Content-Length: 5\r\nContent-Length: 6\r\n", "Content-Length: 5, 6\r\n",
           "Content-Length: -1\r\n", "Content-Length: 5x\r\n",
           "Transfer-Encoding: chunked\r\nContent-Length: 5\r\n",
           "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n", "Transfer-Encoding: gzip\r\n",
           "Transfer-Encoding: gzip, chunked\r\n",
           "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n", "X-A: 1\r\n folded\r\n",
           "X-A: 1\r\n\tfolded\r\n",
           "Host: b\r\n",  // a second Host
       }) {
    EXPECT_EQ(status_of(std::string("POST /tokenize HTTP/1.1\r\nHost: a\r\n") + headers + "\r\n"),
              400)
        << headers;
  }
  // The same value twice is one length, as RFC 9110 8.6 allows.
  EXPECT_EQ(status_of("POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n"), 200);
}

TEST(RequestHead, LimitsAndEncodings) {
  HttpLimits limits;
  limits.max_body_bytes = 1000;
  limits.max_header_count = 10;
  EXPECT_EQ(status_of("POST / HTTP/1.1\r\nContent-Length: 1001\r\n\r\n", limits), 413);
  EXPECT_EQ(status_of("POST / HTTP/1.1\r\nContent-Length: 1000\r\n\r\n", limits), 200);
  std::string many = "GET / HTTP/1.1\r\n";
  for (int i = 0; i < 11; ++i) many += "X-" + std::to_string(i) + ": v\r\n";
  EXPECT_EQ(status_of(many + "\r\n", limits), 431);
  limits.max_header_bytes = 64;
  EXPECT_EQ(status_of("GET /" + std::string(100, 'a') + " HTTP/1.1\r\n\r\n", limits), 431);
  EXPECT_EQ(status_of("POST / HTTP/1.1\r\nContent-Encoding: gzip\r\nContent-Length: 3\r\n\r\n"),
            415);
  EXPECT_EQ(status_of("POST / HTTP/1.1\r\nContent-Encoding: identity\r\n\r\n"), 200);
  EXPECT_EQ(status_of("GARBAGE\r\n\r\n"), 400);
  EXPECT_EQ(status_of("GET / HTTP/9.9\r\n\r\n"), 400);
}

TEST(RequestHead, RandomMutationsEndInAHeadOrA4xx) {
  const std::vector<std::string> seeds = {
      "POST /v1/completions HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\n"
      "Content-Length: 17\r\n\r\n",
      "GET /health HTTP/1.1\r\nHost: a\r\nAccept-Encoding: gzip;q=0.5\r\n\r\n",
      "POST /tokenize HTTP/1.1\r\nTransfer-Encoding: chunked\r\nExpect: 100-continue\r\n\r\n",
  };
  const std::string alphabet = std::string("\r\n :;,\t\x7f\x80\xff\0", 12) + "0123456789abcXYZ-/?";
  std::mt19937 rng(11);
  HttpLimits limits;
  limits.max_header_bytes = 512;
  for (int i = 0; i < 20000; ++i) {
    std::string head = seeds[rng() % seeds.size()];
    const int edits = 1 + static_cast<int>(rng() % 6);
    for (int e = 0; e < edits && head.size() > 4; ++e) {
      const std::size_t at = rng() % (head.size() - 4);  // keep the final blank line
      switch (rng() % 3) {
        case 0: head[at] = alphabet[rng() % alphabet.size()]; break;
        case 1: head.insert(at, 1 + rng() % 40, alphabet[rng() % alphabet.size()]); break;
        default: head.erase(at, 1 + rng() % 8); break;
      }
    }
    if (head.size() < 4 || head.compare(head.size() - 4, 4, "\r\n\r\n") != 0) head += "\r\n\r\n";
    auto r = parse(head, limits);
    if (r.ok()) {
      EXPECT_FALSE(r->method.empty());
    } else {
      const int s = r.error().http_status;
      EXPECT_TRUE(s == 400 || s == 413 || s == 415 || s == 431) << s;
      EXPECT_FALSE(r.error().message.empty());
    }
  }
}

}  // namespace
}  // namespace vpod::server
