#include "runtime/text.h"

#include <cstdint>
#include <cstdio>

namespace attnkit {

std::string TerminalSafe(std::string_view s, bool keep_newlines) {
  std::string out;
  out.reserve(s.size());
  char buf[16];
  auto byte_escape = [&](unsigned char c) {
    std::snprintf(buf, sizeof(buf), "\\x%02x", c);
    out += buf;
  };
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      if ((c < 0x20 && !(keep_newlines && c == '\n')) || c == 0x7f) {
        byte_escape(c);
      } else {
        out += static_cast<char>(c);
      }
      ++i;
      continue;
    }
    // A UTF-8 sequence: its length and code point, or an invalid byte.
    const size_t len = c >= 0xf0 && c < 0xf5   ? 4
                       : c >= 0xe0 && c < 0xf0 ? 3
                       : c >= 0xc2 && c < 0xe0 ? 2
                                               : 0;
    bool valid = len != 0 && i + len <= s.size();
    uint32_t cp = len == 2 ? c & 0x1fu : len == 3 ? c & 0x0fu : c & 0x07u;
    for (size_t k = 1; valid && k < len; ++k) {
      const auto cc = static_cast<unsigned char>(s[i + k]);
      valid = (cc & 0xc0u) == 0x80u;
      cp = (cp << 6) | (cc & 0x3fu);
    }
    // Overlong 3- and 4-byte forms, surrogates, beyond U+10FFFF.
    if (valid && ((len == 3 && (cp < 0x800 || (cp >= 0xd800 && cp < 0xe000))) ||
                  (len == 4 && (cp < 0x10000 || cp > 0x10ffff)))) {
      valid = false;
    }
    if (!valid) {
      byte_escape(c);
      ++i;
      continue;
    }
    if ((cp >= 0x80 && cp < 0xa0) || (cp >= 0x202a && cp <= 0x202e) ||
        (cp >= 0x2066 && cp <= 0x2069)) {
      std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(cp));
      out += buf;
    } else {
      out.append(s.substr(i, len));
    }
    i += len;
  }
  return out;
}

std::string MarkupEscape(std::string_view raw) {
  const std::string s = TerminalSafe(raw, /*keep_newlines=*/true);
  std::string out;
  out.reserve(s.size());
  for (const char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

}  // namespace attnkit
