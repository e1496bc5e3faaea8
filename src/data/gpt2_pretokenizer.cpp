// GPT-2's pre-tokenizer, the parts kept out of line: the questions asked of ICU, the table of
// planes 0 and 1 built from them once, the class of a non-ASCII code point, the UTF-8 check of a
// whole text and UTF-8 encoding of one code point. The scanner and class_at() are in the header.
#include "data/gpt2_pretokenizer.h"

#include "core/error.h"

#include <unicode/uchar.h>

#include <cstring>
#include <vector>

namespace tidal::data::gpt2 {
namespace {

constexpr char32_t kTableEnd = 0x20000;  // class_table() covers [0, kTableEnd)

CharClass icu_class(char32_t c) {
  const auto u = UChar32(c);
  if (u_isUWhiteSpace(u)) return kSpace;
  const std::uint32_t mask = U_MASK(u_charType(u));
  if (mask & U_GC_L_MASK) return kLetter;
  if (mask & U_GC_N_MASK) return kNumber;
  return kOther;
}

}  // namespace

const std::uint8_t* class_table() {
  static const std::vector<std::uint8_t> table = [] {
    std::vector<std::uint8_t> t(kTableEnd);
    for (char32_t c = 0; c < kTableEnd; ++c) t[std::size_t(c)] = icu_class(c);
    for (std::size_t c = 0; c < kAsciiClass.size(); ++c)
      TIDAL_ASSERT(t[c] == kAsciiClass[c], "ICU classes U+{:04X} as {}, the ASCII table as {}", c, int(t[c]),
                   int(kAsciiClass[c]));
    return t;
  }();
  return table.data();
}

CharClass non_ascii_class_at(const unsigned char* s, std::size_t i, std::size_t& len) {
  static const std::uint8_t* const table = class_table();
  const char32_t c = decode_at(s, i, len);
  return c < kTableEnd ? CharClass(table[c]) : icu_class(c);
}

std::size_t first_invalid_utf8(std::string_view text) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const std::size_t n = text.size();
  std::size_t i = 0;
  while (i < n) {
    if (i + 8 <= n) {  // eight ASCII bytes at once
      std::uint64_t w;
      std::memcpy(&w, s + i, 8);
      if ((w & 0x8080808080808080ull) == 0) {
        i += 8;
        continue;
      }
    }
    const unsigned b = s[i];
    std::size_t len;
    unsigned lo = 0x80, hi = 0xBF;  // the range of the second byte
    if (b < 0x80) {
      ++i;
      continue;
    } else if (b >= 0xC2 && b <= 0xDF) {
      len = 2;
    } else if (b >= 0xE0 && b <= 0xEF) {
      len = 3;
      if (b == 0xE0) lo = 0xA0;
      if (b == 0xED) hi = 0x9F;
    } else if (b >= 0xF0 && b <= 0xF4) {
      len = 4;
      if (b == 0xF0) lo = 0x90;
      if (b == 0xF4) hi = 0x8F;
    } else {
      return i;
    }
    if (i + len > n || s[i + 1] < lo || s[i + 1] > hi) return i;
    for (std::size_t k = 2; k < len; ++k)
      if ((s[i + k] & 0xC0) != 0x80) return i;
    i += len;
  }
  return std::string_view::npos;
}

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += char(c);
  } else if (c < 0x800) {
    out += char(0xC0 | (c >> 6));
    out += char(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += char(0xE0 | (c >> 12));
    out += char(0x80 | ((c >> 6) & 0x3F));
    out += char(0x80 | (c & 0x3F));
  } else {
    out += char(0xF0 | (c >> 18));
    out += char(0x80 | ((c >> 12) & 0x3F));
    out += char(0x80 | ((c >> 6) & 0x3F));
    out += char(0x80 | (c & 0x3F));
  }
}

}  // namespace tidal::data::gpt2
