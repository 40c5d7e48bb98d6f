// The normalizers (normalizer.h): each supported normalizer's normalize step.

#include "tokenizer/normalizer.h"

#include <utf8proc.h>

#include <cstdlib>

namespace vpod::tokenizer {
namespace {

// Every code point below U+0300 is NFC-stable and composes with nothing before
// it, so text whose bytes are all below 0xCC (the lead byte of U+0300) is
// already in NFC; ASCII is in every form.
bool unchanged_by(UnicodeForm form, const std::string& text) {
  const unsigned char limit = form == UnicodeForm::nfc ? 0xCC : 0x80;
  for (const char c : text) {
    if (static_cast<unsigned char>(c) >= limit) return false;
  }
  return true;
}

}  // namespace

Status UnicodeNormalizer::normalize(std::string& text) const {
  if (unchanged_by(form_, text)) return {};
  int options = UTF8PROC_STABLE;
  switch (form_) {
    case UnicodeForm::nfc: options |= UTF8PROC_COMPOSE; break;
    case UnicodeForm::nfd: options |= UTF8PROC_DECOMPOSE; break;
    case UnicodeForm::nfkc: options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
    case UnicodeForm::nfkd: options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
  }
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t length = utf8proc_map(
      reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
      static_cast<utf8proc_ssize_t>(text.size()), &out, static_cast<utf8proc_option_t>(options));
  if (length < 0) {
    return invalid_argument(std::string("unicode normalization failed: ") +
                            utf8proc_errmsg(length));
  }
  text.assign(reinterpret_cast<const char*>(out), static_cast<std::size_t>(length));
  std::free(out);
  return {};
}

Status PrependNormalizer::normalize(std::string& text) const {
  if (!text.empty()) text.insert(0, prepend_);
  return {};
}

Result<std::string> ReplaceNormalizer::replace(std::string_view text) const {
  std::vector<MatchSpan> spans;
  VPOD_RETURN_IF_ERROR(pattern_.find_matches(text, spans));
  std::string out;
  out.reserve(text.size());
  for (const MatchSpan& span : spans) {
    if (span.is_match) {
      out += content_;
    } else {
      out.append(text.data() + span.begin, span.end - span.begin);
    }
  }
  return out;
}

Status ReplaceNormalizer::normalize(std::string& text) const {
  VPOD_ASSIGN_OR_RETURN(text, replace(text));
  return {};
}

Status SequenceNormalizer::normalize(std::string& text) const {
  for (const auto& step : steps_) VPOD_RETURN_IF_ERROR(step->normalize(text));
  return {};
}

}  // namespace vpod::tokenizer
