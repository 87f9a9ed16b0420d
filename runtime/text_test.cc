#include "runtime/text.h"

#include <gtest/gtest.h>

#include <string>
#include <string_view>

namespace attnkit {
namespace {

TEST(TextTest, TerminalSafeEscapesControlsBidiAndBadUtf8) {
  EXPECT_EQ(TerminalSafe("decode/x/kv_len:512"), "decode/x/kv_len:512");
  EXPECT_EQ(TerminalSafe("a\x1b[31mred\x1b[0m"), "a\\x1b[31mred\\x1b[0m");
  EXPECT_EQ(TerminalSafe(std::string_view("n\0l", 3)), "n\\x00l");
  EXPECT_EQ(TerminalSafe("a\nb\r\t\x7f"), "a\\x0ab\\x0d\\x09\\x7f");
  EXPECT_EQ(TerminalSafe("a\nb", /*keep_newlines=*/true), "a\nb");
  EXPECT_EQ(TerminalSafe("csi\xc2\x9b"
                         "2J"),
            "csi\\u009b2J");  // C1 CSI
  EXPECT_EQ(TerminalSafe("\xe2\x80\xae"
                         "evil"),
            "\\u202eevil");                              // RLO
  EXPECT_EQ(TerminalSafe("\xe2\x81\xa6x"), "\\u2066x");  // LRI
  EXPECT_EQ(TerminalSafe("bad\xff\xc3"), "bad\\xff\\xc3");
  EXPECT_EQ(TerminalSafe("\xc0\xaf"), "\\xc0\\xaf");  // overlong '/'
  // Printable UTF-8 passes: e-acute, CJK, an emoji.
  EXPECT_EQ(TerminalSafe("caf\xc3\xa9 \xe6\x97\xa5 \xf0\x9f\x98\x80"),
            "caf\xc3\xa9 \xe6\x97\xa5 \xf0\x9f\x98\x80");
}

TEST(TextTest, MarkupEscapeEscapesMarkupAndControls) {
  EXPECT_EQ(MarkupEscape("a<b>&\"c'"), "a&lt;b&gt;&amp;&quot;c&#39;");
  EXPECT_EQ(MarkupEscape("x\x1b[0m\ny"), "x\\x1b[0m\ny");
}

}  // namespace
}  // namespace attnkit
