// GPT-2's pre-tokenizer: the code points of UTF-8 text, their character classes, and the scanner
// that cuts text into the pieces of GPT-2's pattern
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// without a regex engine. Letters, numbers and White_Space are ICU's; the classes of planes 0 and 1
// are asked of ICU once, into a table (class_table(), checked against the constexpr ASCII table),
// the rest each time. Invariants: the scanner's input is well-formed UTF-8 (check it with
// first_invalid_utf8 first); the pieces tile the text in order. The scanner, decode_at and class_at
// (its ASCII path) are inline here because BpeTokenizer's encode runs them on every byte.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace tidal::data::gpt2 {

// ---- Code points: UTF-8 and the pre-tokenizer's character classes ----

enum CharClass : std::uint8_t { kOther, kLetter, kNumber, kSpace };

// ASCII as ICU classes it: letters, digits, and \t \n \v \f \r and ' ' as White_Space.
inline constexpr std::array<CharClass, 128> kAsciiClass = [] {
  std::array<CharClass, 128> t{};
  for (unsigned c = 0; c < 128; ++c) {
    const bool letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
    t[c] = letter ? kLetter : c >= '0' && c <= '9' ? kNumber : (c >= 9 && c <= 13) || c == ' ' ? kSpace : kOther;
  }
  return t;
}();

// Classes of planes 0 and 1 (every script and emoji in common use), asked of ICU once: the
// CharClass of each code point below U+20000. Built on the first call (thread-safe).
const std::uint8_t* class_table();

// The first byte of text that is not part of well-formed UTF-8 (the rules Python's and Rust's
// strict decoders apply: no overlong forms, no surrogates, nothing above U+10FFFF), or npos.
std::size_t first_invalid_utf8(std::string_view text);

// Appends code point c as UTF-8.
void append_utf8(std::string& out, char32_t c);

// Decodes the (well-formed) code point at s[i]; `len` gets its length in bytes.
inline char32_t decode_at(const unsigned char* s, std::size_t i, std::size_t& len) {
  const unsigned b = s[i];
  if (b < 0x80) return len = 1, b;
  if (b < 0xE0) return len = 2, ((b & 0x1F) << 6) | (s[i + 1] & 0x3F);
  if (b < 0xF0) return len = 3, ((b & 0x0F) << 12) | ((s[i + 1] & 0x3F) << 6) | (s[i + 2] & 0x3F);
  return len = 4, ((b & 0x07) << 18) | ((s[i + 1] & 0x3F) << 12) | ((s[i + 2] & 0x3F) << 6) | (s[i + 3] & 0x3F);
}

// class_at() of a code point outside ASCII: from class_table(), else from ICU. Out of line (in the
// .cpp) so that class_at(), its ASCII test and this call, stays small enough to inline everywhere.
CharClass non_ascii_class_at(const unsigned char* s, std::size_t i, std::size_t& len);

// The class of the (well-formed) code point at s[i]; `len` gets its length in bytes.
inline CharClass class_at(const unsigned char* s, std::size_t i, std::size_t& len) {
  if (s[i] < 0x80) return len = 1, kAsciiClass[s[i]];
  return non_ascii_class_at(s, i, len);
}

// ---- GPT-2's pre-tokenizer pattern, as a scanner ----

// The end of a run of code points of class `c` that starts at s[i].
inline std::size_t class_run_end(const unsigned char* s, std::size_t n, std::size_t i, CharClass c) {
  std::size_t len;
  while (i < n && class_at(s, i, len) == c) i += len;
  return i;
}

// 's 't 're 've 'm 'll 'd at s[i] == '\'' (case-sensitive, as the pattern is): its end, or 0.
inline std::size_t contraction_end(const unsigned char* s, std::size_t n, std::size_t i) {
  if (i + 1 >= n) return 0;
  switch (s[i + 1]) {
    case 's':
    case 't':
    case 'm':
    case 'd':
      return i + 2;
    case 'r':
    case 'v':
      return i + 2 < n && s[i + 2] == 'e' ? i + 3 : 0;
    case 'l':
      return i + 2 < n && s[i + 2] == 'l' ? i + 3 : 0;
    default:
      return 0;
  }
}

// White space from s[i]: `\s+(?!\S)` takes the run but its last code point when something
// follows (that one then prefixes the next piece if it is ' ', or stands alone via `\s+`); a run
// of one, or one that ends the text, is a piece whole.
inline std::size_t space_piece_end(const unsigned char* s, std::size_t n, std::size_t i, std::size_t len) {
  std::size_t last = i, j = i + len;
  while (j < n && class_at(s, j, len) == kSpace) last = j, j += len;
  return j == n || last == i ? j : last;
}

// The end of the piece that starts at s[i]: the pattern's first alternative that matches there.
inline std::size_t piece_end(const unsigned char* s, std::size_t n, std::size_t i) {
  if (s[i] == '\'') {
    if (const std::size_t end = contraction_end(s, n, i)) return end;
  }
  std::size_t len;
  const CharClass c = class_at(s, i, len);
  if (c != kSpace) return class_run_end(s, n, i + len, c);  // \p{L}+, \p{N}+ or [^\s\p{L}\p{N}]+
  if (s[i] == ' ' && i + 1 < n) {                           // the same after one ' '
    std::size_t next_len;
    const CharClass next = class_at(s, i + 1, next_len);
    if (next != kSpace) return class_run_end(s, n, i + 1 + next_len, next);
  }
  return space_piece_end(s, n, i, len);
}

// Calls emit(begin, end) for each piece of (well-formed UTF-8) `text` in order; the pieces tile
// the text.
template <class Emit>
void for_each_piece(std::string_view text, Emit&& emit) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  for (std::size_t i = 0, end; i < text.size(); i = end) {
    end = piece_end(s, text.size(), i);
    emit(i, end);
  }
}

}  // namespace tidal::data::gpt2
