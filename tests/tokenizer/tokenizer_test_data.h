// Where the tokenizer tests find their data: the committed corpus and golden
// ids (tests/tokenizer/data, made by tools/tokenizer/make_golden.py) and the
// shared fixture tokenizers (<repo>/../shared/fixtures, beside the clone in CI).
#pragma once

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

namespace vpod::tokenizer::testing {

inline std::filesystem::path test_data_dir() { return VPOD_TOKENIZER_TEST_DATA_DIR; }
inline std::filesystem::path fixture_tokenizers_dir() {
  return std::filesystem::path(VPOD_FIXTURES_DIR) / "tokenizers";
}

inline std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

inline std::vector<nlohmann::json> read_jsonl(const std::filesystem::path& path) {
  std::vector<nlohmann::json> rows;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) rows.push_back(nlohmann::json::parse(line));
  }
  return rows;
}

}  // namespace vpod::tokenizer::testing
