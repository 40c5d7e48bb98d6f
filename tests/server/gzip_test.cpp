// gzip of responses: which Accept-Encoding values take it, and that what is
// sent inflates back to the body.
#include "server/gzip.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <random>
#include <string>

namespace vpod::server {
namespace {

std::string gunzip(const std::string& packed) {
  z_stream z{};
  EXPECT_EQ(inflateInit2(&z, 15 + 16), Z_OK);
  std::string out;
  char buf[16384];
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(packed.data()));
  z.avail_in = static_cast<uInt>(packed.size());
  int rc = Z_OK;
  while (rc == Z_OK) {
    z.next_out = reinterpret_cast<Bytef*>(buf);
    z.avail_out = sizeof(buf);
    rc = inflate(&z, Z_NO_FLUSH);
    out.append(buf, sizeof(buf) - z.avail_out);
  }
  EXPECT_EQ(rc, Z_STREAM_END);
  inflateEnd(&z);
  return out;
}

TEST(Gzip, AcceptEncodingValues) {
  EXPECT_TRUE(accepts_gzip("gzip"));
  EXPECT_TRUE(accepts_gzip("gzip, deflate"));  // openai-python / httpx
  EXPECT_TRUE(accepts_gzip("deflate, GZIP;q=0.5"));
  EXPECT_TRUE(accepts_gzip("br;q=1.0, x-gzip"));
  EXPECT_TRUE(accepts_gzip("*"));
  EXPECT_FALSE(accepts_gzip(""));
  EXPECT_FALSE(accepts_gzip("identity"));
  EXPECT_FALSE(accepts_gzip("br, deflate"));
  EXPECT_FALSE(accepts_gzip("gzip;q=0"));
  EXPECT_FALSE(accepts_gzip("gzip; q=0.000"));
  EXPECT_FALSE(accepts_gzip("*, gzip;q=0"));  // an explicit refusal wins over *
  EXPECT_FALSE(accepts_gzip("*;q=0"));
  EXPECT_FALSE(accepts_gzip("gzipped"));
}

TEST(Gzip, RoundTrips) {
  std::mt19937 rng(3);
  for (std::size_t size :
       {std::size_t{0}, std::size_t{1}, std::size_t{1000}, std::size_t{1} << 20}) {
    std::string body(size, '\0');
    for (char& c : body) c = static_cast<char>("{}\":,abc 0123"[rng() % 13]);
    const auto packed = gzip_compress(body);
    ASSERT_TRUE(packed.has_value());
    EXPECT_EQ(static_cast<unsigned char>((*packed)[0]), 0x1f);  // the gzip magic
    EXPECT_EQ(static_cast<unsigned char>((*packed)[1]), 0x8b);
    EXPECT_EQ(gunzip(*packed), body);
  }
}

}  // namespace
}  // namespace vpod::server
