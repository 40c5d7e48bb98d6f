// Shared helpers of the Jinja and chat-template tests: where the golden data
// lives, the fixed clock the goldens were rendered with, and how a vpod
// error is compared with the jinja2 error recorded in a golden.
#pragma once

#include <gtest/gtest.h>

#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace vpod::tokenizer::jinja::test {

inline std::filesystem::path chat_data_dir() {
  return std::filesystem::path(VPOD_TOKENIZER_TEST_DATA_DIR) / "chat";
}

inline std::filesystem::path fixtures_dir() { return VPOD_FIXTURES_DIR; }

inline nlohmann::ordered_json load_json(const std::filesystem::path& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  std::stringstream buffer;
  buffer << in.rdbuf();
  return nlohmann::ordered_json::parse(buffer.str());
}

inline std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// make_goldens.py renders with strftime_now() at 2024-07-26 13:05:09 local time.
inline std::time_t golden_now() {
  std::tm t{};
  t.tm_year = 2024 - 1900;
  t.tm_mon = 6;
  t.tm_mday = 26;
  t.tm_hour = 13;
  t.tm_min = 5;
  t.tm_sec = 9;
  t.tm_isdst = -1;
  return std::mktime(&t);
}

inline bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// A golden error is {"kind": raised|undefined|syntax|runtime, "message",
// "loose"?}.
// raise_exception() messages must match exactly; jinja2's undefined-variable
// messages and its type-error texts must end ours; syntax errors must name
// the same line and, where jinja2 words it, the same message.
inline void expect_same_error(const nlohmann::ordered_json& golden, const Status& status,
                              bool at_parse) {
  const std::string kind = golden["kind"];
  const std::string message = golden["message"];
  const std::string ours = status.message();
  if (kind == "raised") {
    EXPECT_FALSE(at_parse);
    EXPECT_EQ(status.code(), StatusCode::invalid_argument);
    EXPECT_EQ(ours, message);
  } else if (kind == "undefined") {
    EXPECT_FALSE(at_parse) << ours;
    EXPECT_EQ(status.code(), StatusCode::invalid_argument) << ours;
    EXPECT_TRUE(ends_with(ours, ": " + message)) << "ours: " << ours << "\njinja2: " << message;
  } else if (kind == "syntax") {
    EXPECT_TRUE(at_parse) << ours;
    EXPECT_TRUE(status.code() == StatusCode::invalid_argument ||
                status.code() == StatusCode::unimplemented)
        << ours;
    if (message.rfind("line ", 0) == 0) {
      const size_t colon = message.find(": ");
      const std::string line = message.substr(5, colon - 5);
      EXPECT_NE(ours.find("at line " + line + ": "), std::string::npos)
          << "ours: " << ours << "\njinja2: " << message;
      EXPECT_TRUE(ends_with(ours, message.substr(colon)))
          << "ours: " << ours << "\njinja2: " << message;
    }
  } else if (kind == "runtime") {
    // Random-expression goldens ("loose") only need an error; the others'
    // "TypeError: text" must end our message.
    if (golden.value("loose", false)) return;
    const size_t colon = message.find(": ");
    const std::string text = colon == std::string::npos ? message : message.substr(colon + 2);
    EXPECT_TRUE(ends_with(ours, text)) << "ours: " << ours << "\njinja2: " << message;
  } else {
    ADD_FAILURE() << "unknown golden error kind " << kind;
  }
}

}  // namespace vpod::tokenizer::jinja::test
