// The safetensors reader against valid, corrupt and hostile files.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "model/safetensors.h"

namespace vpod::model {
namespace {

namespace fs = std::filesystem;

// A file image: length prefix, header text, `data_bytes` bytes of data.
std::string image(const std::string& header, std::size_t data_bytes, std::uint64_t length = 0) {
  const std::uint64_t n = length != 0 ? length : header.size();
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  out += header;
  out.append(data_bytes, '\x01');
  return out;
}

Status parse(const std::string& img) {
  return parse_safetensors_image(img, "f.safetensors").status();
}

void expect_error(const std::string& img, const std::string& needle) {
  const Status s = parse(img);
  ASSERT_FALSE(s.ok()) << "accepted: " << img.substr(8, 200);
  EXPECT_NE(s.message().find(needle), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("f.safetensors"), std::string::npos) << s.message();
}

TEST(Safetensors, ParsesValidHeader) {
  const std::string h =
      R"({"__metadata__":{"format":"pt"},"b":{"dtype":"BF16","shape":[2,3],"data_offsets":[16,28]},)"
      R"("a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"e":{"dtype":"F16","shape":[0],"data_offsets":[28,28]}})";
  auto entries = parse_safetensors_image(image(h, 28), "f.safetensors");
  ASSERT_TRUE(entries.ok()) << entries.status().to_string();
  ASSERT_EQ(entries->size(), 3u);
  for (const auto& e : *entries) {
    if (e.name == "b") {
      EXPECT_EQ(e.dtype, DType::bf16);
      EXPECT_EQ(e.shape, (std::vector<std::int64_t>{2, 3}));
      EXPECT_EQ(e.begin, 16u);
    }
  }
}

TEST(Safetensors, RejectsTruncatedFiles) {
  expect_error(std::string("\x10\x00\x00", 3), "too short");
  const std::string h = R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})";
  expect_error(image(h, 8), "past the end");                  // data cut short
  expect_error(image(h, 16).substr(0, 20), "out of bounds");  // header cut short
}

TEST(Safetensors, RejectsAbsurdHeaderLength) {
  expect_error(image("{}", 0, std::uint64_t{1} << 62), "out of bounds");
  expect_error(image("{}", 0, ~std::uint64_t{0}), "out of bounds");
  expect_error(image("{}", 0, kMaxSafetensorsHeaderBytes + 1), "out of bounds");
}

TEST(Safetensors, RejectsOverlapsHolesAndTrailingBytes) {
  expect_error(image(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
                     R"("b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
                     16),
               "overlaps");
  expect_error(image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})", 16), "hole");
  expect_error(image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 16),
               "not covered");
}

TEST(Safetensors, RejectsWrongDtypeAndShapeMismatch) {
  expect_error(image(R"({"w":{"dtype":"I8","shape":[4],"data_offsets":[0,4]}})", 4), "'I8'");
  expect_error(image(R"({"w":{"dtype":"Q4","shape":[4],"data_offsets":[0,4]}})", 4),
               "unknown dtype");
  expect_error(image(R"({"w":{"dtype":"F16","shape":[4],"data_offsets":[0,4]}})", 4), "tensor 'w'");
  expect_error(
      image(R"({"w":{"dtype":"F32","shape":[4294967296,4294967296,16],"data_offsets":[0,4]}})", 4),
      "too large");
  expect_error(image(R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4), "negative");
  expect_error(image(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}})", 4),
               "begin > end");
  expect_error(image(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":1}})", 4),
               "unexpected field");
}

TEST(Safetensors, RejectsMalformedJson) {
  expect_error(image(R"({"w":)", 0), "not valid JSON");
  expect_error(image(R"([1,2])", 0), "not a JSON object");
  expect_error(image(std::string(100000, '[') + std::string(100000, ']'), 0), "nested");
  expect_error(image(R"({"w":{"dtype":"F32","shape":[[[[1]]]],"data_offsets":[0,4]}})", 4),
               "nested");
}

TEST(Safetensors, WritesWhatItReads) {
  const fs::path dir = fs::temp_directory_path() / ("vpod_st_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::vector<SafetensorsWriteEntry> entries = {{"model.norm.weight", DType::f32, {3}},
                                                {"model.embed_tokens.weight", DType::bf16, {5, 3}}};
  auto fill = [](std::size_t index, std::int64_t first, std::int64_t count, std::uint8_t* dst) {
    for (std::int64_t i = 0; i < count; ++i) {
      const float v = static_cast<float>(index * 100 + first + i);
      if (index == 0) {
        std::memcpy(dst + 4 * i, &v, 4);
      } else {
        const std::uint16_t b = float_to_bf16_bits(v);
        std::memcpy(dst + 2 * i, &b, 2);
      }
    }
  };
  ASSERT_TRUE(
      write_safetensors(dir / "model.safetensors", entries, {{"format", "pt"}}, fill, 2).ok());
  auto ckpt = Checkpoint::open(dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().to_string();
  const WeightTensor* e = ckpt->find("model.embed_tokens.weight");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->shape, (std::vector<std::int64_t>{5, 3}));
  EXPECT_EQ(e->view().get({4, 2}), 114.0f);
  EXPECT_EQ(ckpt->find("model.norm.weight")->view().get({2}), 2.0f);
  fs::remove_all(dir);
}

TEST(Safetensors, ShardedIndexMustMatchShards) {
  const fs::path dir = fs::temp_directory_path() / ("vpod_shard_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  auto write = [&](const char* name, const std::string& img) {
    std::ofstream(dir / name, std::ios::binary) << img;
  };
  write("a.safetensors", image(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 4));
  write("b.safetensors", image(R"({"y":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 4));
  auto index = [&](const std::string& map) {
    std::ofstream(dir / "model.safetensors.index.json")
        << R"({"metadata":{},"weight_map":)" << map << "}";
  };
  index(R"({"x":"a.safetensors","y":"b.safetensors"})");
  auto ok = Checkpoint::open(dir);
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  EXPECT_EQ(ok->tensors().size(), 2u);

  index(R"({"x":"a.safetensors"})");  // y in b is not listed; b is not opened, x is fine
  EXPECT_TRUE(Checkpoint::open(dir).ok());
  index(R"({"x":"a.safetensors","y":"a.safetensors"})");
  auto missing = Checkpoint::open(dir);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("'y'"), std::string::npos);
  index(R"({"x":"b.safetensors","y":"b.safetensors"})");
  auto unexpected = Checkpoint::open(dir);
  ASSERT_FALSE(unexpected.ok());
  index(R"({"x":"../a.safetensors"})");
  EXPECT_FALSE(Checkpoint::open(dir).ok());
  index(R"({"x":"c.safetensors"})");
  EXPECT_FALSE(Checkpoint::open(dir).ok());
  fs::remove_all(dir);
}

}  // namespace
}  // namespace vpod::model
