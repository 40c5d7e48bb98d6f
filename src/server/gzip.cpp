// gzip (gzip.h): compressing response bodies through zlib, and reading
// Accept-Encoding.
#include "server/gzip.h"

#include <zlib.h>

#include <cctype>
#include <cstdlib>

namespace vpod::server {
namespace {

// zlib's windowBits for a gzip header and trailer around the deflate stream.
constexpr int kGzipWindowBits = 15 + 16;
constexpr int kMemLevel = 8;
// Level 1: responses are small JSON; speed matters more than the last bytes.
constexpr int kLevel = 1;

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i]))) {
      return false;
    }
  }
  return true;
}

// The q-value of one Accept-Encoding element's parameters (";q=0.5"), 1 when absent.
double q_value(std::string_view params) {
  while (!params.empty()) {
    const std::size_t semi = params.find(';');
    std::string_view p = trim(params.substr(0, semi));
    params = semi == std::string_view::npos ? std::string_view() : params.substr(semi + 1);
    if (p.size() >= 2 && (p[0] == 'q' || p[0] == 'Q') && p[1] == '=') {
      const std::string number(p.substr(2));
      char* end = nullptr;
      const double q = std::strtod(number.c_str(), &end);
      return end == number.c_str() ? 0.0 : q;
    }
  }
  return 1.0;
}

}  // namespace

bool accepts_gzip(std::string_view header) {
  bool gzip = false;
  while (!header.empty()) {
    const std::size_t comma = header.find(',');
    std::string_view element = header.substr(0, comma);
    header = comma == std::string_view::npos ? std::string_view() : header.substr(comma + 1);
    const std::size_t semi = element.find(';');
    const std::string_view coding = trim(element.substr(0, semi));
    const double q = semi == std::string_view::npos ? 1.0 : q_value(element.substr(semi + 1));
    if (iequals(coding, "gzip") || iequals(coding, "x-gzip")) return q > 0;
    if (coding == "*") gzip = q > 0;  // an explicit gzip element, seen later, wins
  }
  return gzip;
}

std::optional<std::string> gzip_compress(std::string_view data) {
  z_stream z{};
  if (deflateInit2(&z, kLevel, Z_DEFLATED, kGzipWindowBits, kMemLevel, Z_DEFAULT_STRATEGY) !=
      Z_OK) {
    return std::nullopt;
  }
  std::string out(deflateBound(&z, static_cast<uLong>(data.size())), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  z.avail_in = static_cast<uInt>(data.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  const int rc = deflate(&z, Z_FINISH);
  const std::size_t written = out.size() - z.avail_out;
  deflateEnd(&z);
  if (rc != Z_STREAM_END) return std::nullopt;
  out.resize(written);
  return out;
}

}  // namespace vpod::server
