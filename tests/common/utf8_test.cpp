// The one UTF-8 module (common/utf8.h), as the server uses it on client input
// and on token bytes: validity, and replacement as Python and Rust do it.
#include "common/utf8.h"

#include <gtest/gtest.h>

namespace vpod {
namespace {

TEST(Utf8, ValidityAndReplacement) {
  EXPECT_TRUE(utf8::is_valid(""));
  EXPECT_TRUE(utf8::is_valid("a\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80"));
  EXPECT_FALSE(utf8::is_valid("\x80"));
  EXPECT_FALSE(utf8::is_valid("\xf4\x90\x80\x80"));  // past U+10FFFF
  EXPECT_FALSE(utf8::is_valid("\xe0\x80\xaf"));      // overlong
  // Python: b"a\xf0\x9f\x98b\xff".decode(errors="replace") == "a\ufffdb\ufffd"
  EXPECT_EQ(utf8::lossy("a\xf0\x9f\x98"
                        "b\xff"),
            "a\xef\xbf\xbd"
            "b\xef\xbf\xbd");
  // Python: b"\xed\xa0\x80".decode(errors="replace") == "\ufffd\ufffd\ufffd"
  EXPECT_EQ(utf8::lossy("\xed\xa0\x80"), "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");
  EXPECT_EQ(utf8::count_chars("a\xc3\xa9\xf0\x9f\x98\x80"), 3u);
}

}  // namespace
}  // namespace vpod
