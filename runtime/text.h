// Text from outside the program (benchmark JSON, plug-in messages, case
// strings) made safe for where it goes: a terminal, or HTML/XML.
#ifndef ATTNKIT_RUNTIME_TEXT_H_
#define ATTNKIT_RUNTIME_TEXT_H_

#include <string>
#include <string_view>

namespace attnkit {

// `s` made safe to print on a terminal: C0 controls and DEL become \xNN
// (ESC shows as \x1b), C1 controls and the Unicode bidi overrides/isolates
// (U+202A..U+202E, U+2066..U+2069) \uNNNN, bytes that are not UTF-8 \xNN;
// with `keep_newlines`, '\n' stays a line break.
std::string TerminalSafe(std::string_view s, bool keep_newlines = false);

// HTML or XML text and attribute values: TerminalSafe (keeping newlines;
// XML 1.0 cannot carry control characters at all), then & < > " ' as
// entities.
std::string MarkupEscape(std::string_view s);

}  // namespace attnkit

#endif  // ATTNKIT_RUNTIME_TEXT_H_
