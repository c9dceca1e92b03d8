// UTF-8 decoding and encoding shared by the text kernels (nfc.cc, bpe.cc): one decoder, so every
// op names an ill-formed sequence the same way (Unicode 15, Table 3-7: overlong forms, encoded
// surrogates and code points beyond U+10FFFF are ill-formed).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace bitnet_onnx {
namespace text {

// The code point at s[pos] (pos < n): its length, or 0 with *problem set (one of: unexpected
// continuation byte, overlong encoding, invalid byte, sequence cut off by the end of the text,
// missing continuation byte, encoded surrogate, code point beyond U+10FFFF).
inline size_t decode_utf8(const unsigned char* s, size_t n, size_t pos, char32_t* cp, const char** problem) {
  const unsigned lead = s[pos];
  if (lead < 0x80) {
    *cp = lead;
    return 1;
  }
  size_t len;
  char32_t value;
  unsigned second_lo = 0x80, second_hi = 0xBF;  // the lead byte narrows the second byte's range
  if (lead >= 0xC2 && lead <= 0xDF) {
    len = 2, value = lead & 0x1F;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    len = 3, value = lead & 0x0F;
    if (lead == 0xE0) second_lo = 0xA0;  // else overlong
    if (lead == 0xED) second_hi = 0x9F;  // else a surrogate
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    len = 4, value = lead & 0x07;
    if (lead == 0xF0) second_lo = 0x90;  // else overlong
    if (lead == 0xF4) second_hi = 0x8F;  // else beyond U+10FFFF
  } else {
    *problem = lead < 0xC0 ? "unexpected continuation byte" : lead < 0xC2 ? "overlong encoding" : "invalid byte";
    return 0;
  }
  for (size_t k = 1; k < len; ++k) {
    if (pos + k >= n) {
      *problem = "sequence cut off by the end of the text";
      return 0;
    }
    const unsigned b = s[pos + k];
    if (b < 0x80 || b > 0xBF) {
      *problem = "missing continuation byte";
      return 0;
    }
    if (k == 1 && (b < second_lo || b > second_hi)) {
      *problem = lead == 0xED ? "encoded surrogate" : lead == 0xF4 ? "code point beyond U+10FFFF" : "overlong encoding";
      return 0;
    }
    value = value << 6 | (b & 0x3F);
  }
  *cp = value;
  return len;
}

// Byte offset of the first ill-formed sequence (*problem says why), or text.size() when text is
// valid UTF-8.
inline size_t first_invalid_utf8(std::string_view text, const char** problem) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  size_t pos = 0;
  while (pos < n) {
    if (s[pos] < 0x80) {  // ASCII runs: the common case
      ++pos;
      continue;
    }
    char32_t cp;
    const size_t length = decode_utf8(s, n, pos, &cp, problem);
    if (length == 0) return pos;
    pos += length;
  }
  return pos;
}

// Appends the UTF-8 encoding of the scalar value cp.
inline void append_utf8(char32_t cp, std::string* out) {
  char buf[4];
  size_t len;
  if (cp < 0x80) {
    buf[0] = static_cast<char>(cp), len = 1;
  } else if (cp < 0x800) {
    buf[0] = static_cast<char>(0xC0 | cp >> 6), buf[1] = static_cast<char>(0x80 | (cp & 0x3F)), len = 2;
  } else if (cp < 0x10000) {
    buf[0] = static_cast<char>(0xE0 | cp >> 12), buf[1] = static_cast<char>(0x80 | (cp >> 6 & 0x3F));
    buf[2] = static_cast<char>(0x80 | (cp & 0x3F)), len = 3;
  } else {
    buf[0] = static_cast<char>(0xF0 | cp >> 18), buf[1] = static_cast<char>(0x80 | (cp >> 12 & 0x3F));
    buf[2] = static_cast<char>(0x80 | (cp >> 6 & 0x3F)), buf[3] = static_cast<char>(0x80 | (cp & 0x3F)), len = 4;
  }
  out->append(buf, len);
}

}  // namespace text
}  // namespace bitnet_onnx
