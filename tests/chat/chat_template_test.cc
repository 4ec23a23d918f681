// Unit tests of the Jinja subset behind ChatTemplate: whitespace control as transformers sets it
// (trim_blocks, lstrip_blocks), scoping, filters, tests, Python semantics, errors.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "runtime/chat/chat_template.h"

namespace llmrt {
namespace {

using ojson = nlohmann::ordered_json;

std::string render(const std::string& src, const ojson& extra = ojson::object(),
                   const ojson& messages = ojson::array(), bool agp = false) {
  auto t = ChatTemplate::parse(src);
  if (!t.ok()) return "PARSE ERROR: " + t.status().message();
  auto out = (*t)->render(messages, agp, extra);
  if (!out.ok()) return "ERROR: " + out.status().message();
  return *out;
}

TEST(ChatTemplate, TextAndOutput) {
  EXPECT_EQ(render("a{{ 1 + 2 }}b"), "a3b");
  EXPECT_EQ(render("{{ 'x' ~ 1 ~ none }}"), "x1None");
  EXPECT_EQ(render("{{ x }}", {{"x", true}}), "True");
  EXPECT_EQ(render("{{ 7 / 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ 2 ** 3 }}"), "3.5 3 -4 1 8");
  EXPECT_EQ(render("{{ 1.0 }} {{ 0.1 + 0.2 }} {{ 1e-5 }} {{ 1e16 }}"), "1.0 0.30000000000000004 1e-05 1e+16");
}

TEST(ChatTemplate, TrailingNewlineDropped) { EXPECT_EQ(render("hi\n"), "hi"); }

TEST(ChatTemplate, TrimAndLstripBlocks) {
  EXPECT_EQ(render("  {% if true %}\n  x\n  {% endif %}\ny"), "  x\ny");
  EXPECT_EQ(render("a  {%- if true -%}  b  {%- endif %}"), "ab");
  EXPECT_EQ(render("a\n  {%+ if true %}b{% endif %}"), "a\n  b");
  EXPECT_EQ(render("{# c #}\nx"), "x");
  EXPECT_EQ(render("{{ 'a' }}\nb"), "a\nb");  // trim_blocks does not apply to {{ }}
}

TEST(ChatTemplate, ForLoop) {
  EXPECT_EQ(render("{% for x in [1,2,3] %}{{ loop.index }}{{ x }}{% if not loop.last %},{% endif %}{% endfor %}"),
            "11,22,33");
  EXPECT_EQ(render("{% for x in [] %}a{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(render("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}", {{"d", {{"b", 1}, {"a", 2}}}}),
            "b=1;a=2;");
  EXPECT_EQ(render("{% for x in range(10) if x is odd %}{{ x }}{% if x > 4 %}{% break %}{% endif %}{% endfor %}"),
            "135");
  EXPECT_EQ(render("{% for x in [1,2] %}{{ loop.previtem is defined }}{{ loop.revindex }}{% endfor %}"),
            "False2True1");
}

TEST(ChatTemplate, ScopingAndNamespace) {
  EXPECT_EQ(render("{% set x = 1 %}{% for i in [1] %}{% set x = 2 %}{% endfor %}{{ x }}"), "1");
  EXPECT_EQ(render("{% set ns = namespace(x=1) %}{% for i in [1] %}{% set ns.x = 2 %}{% endfor %}{{ ns.x }}"), "2");
  EXPECT_EQ(render("{% set s %}a{{ 1 }}{% endset %}[{{ s }}]"), "[a1]");
  EXPECT_EQ(render("{% set a, b = 1, 2 %}{{ b }}{{ a }}"), "21");
}

TEST(ChatTemplate, Macros) {
  EXPECT_EQ(render("{% macro f(a, b='d') %}{{ a }}-{{ b }}{% endmacro %}{{ f(1) }}|{{ f(1, b=2) }}"), "1-d|1-2");
}

TEST(ChatTemplate, Filters) {
  ojson x = {{"l", {3, 1, 2}}, {"s", "  Hi There "}, {"d", {{"b", 1}, {"a", "é"}}}};
  EXPECT_EQ(render("{{ s | trim | upper }}|{{ s | length }}|{{ l | sort | join(',') }}", x), "HI THERE|11|1,2,3");
  EXPECT_EQ(render("{{ d | tojson }}", x), "{\"b\": 1, \"a\": \"é\"}");
  EXPECT_EQ(render("{{ d | tojson(indent=2) }}", x), "{\n  \"b\": 1,\n  \"a\": \"é\"\n}");
  EXPECT_EQ(render("{{ d | dictsort | first | first }}", x), "a");
  EXPECT_EQ(render("{{ missing | default('z') }}{{ '' | default('y', true) }}"), "zy");
  EXPECT_EQ(render("{{ [{'n': 'a'}, {'n': 'b'}] | map(attribute='n') | join }}"), "ab");
  EXPECT_EQ(render("{{ [{'r': 'u'}, {'r': 's'}] | selectattr('r', 'equalto', 's') | list | length }}"), "1");
  EXPECT_EQ(render("{{ 'a\nb' | indent(2) }}"), "a\n  b");
  EXPECT_EQ(render("{{ [1, 2] | map('string') | list }}"), "['1', '2']");
}

TEST(ChatTemplate, TestsAndOperators) {
  EXPECT_EQ(render("{{ x is defined }}{{ y is none }}{{ 's' is string }}{{ {} is mapping }}", {{"x", 1}, {"y", nullptr}}),
            "TrueTrueTrueTrue");
  EXPECT_EQ(render("{{ 'b' in 'abc' }}{{ 2 not in [1] }}{{ 'k' in {'k': 1} }}"), "TrueTrueTrue");
  EXPECT_EQ(render("{{ 'x' if false }}|{{ 'a' if 0 else 'b' }}"), "|b");
  EXPECT_EQ(render("{{ 3 > 2 > 1 }}{{ 1 < 3 < 2 }}{{ 1 < 2 == 2 }}"), "TrueFalseTrue");
}

TEST(ChatTemplate, StringMethodsAndSlices) {
  EXPECT_EQ(render("{{ 'a,b,,c'.split(',') }}"), "['a', 'b', '', 'c']");
  EXPECT_EQ(render("{{ '  x y  '.split() | length }}{{ 'abc'[::-1] }}{{ 'abcdef'[1:4] }}{{ [1,2,3][-1] }}"), "2cbabcd3");
  EXPECT_EQ(render("{{ '<think>x</think>y'.split('</think>')[-1].lstrip('\\n') }}"), "y");
  EXPECT_EQ(render("{{ 'Hi {}!'.format('you') }}{{ 'ab'.startswith('a') }}"), "Hi you!True");
  EXPECT_EQ(render("{{ 'héllo'[1] }}{{ 'héllo' | length }}"), "é5");
}

TEST(ChatTemplate, Errors) {
  EXPECT_EQ(render("{{ raise_exception('bad role') }}"), "ERROR: chat template error: TemplateError: bad role");
  EXPECT_NE(render("{{ x.y }}").find("UndefinedError"), std::string::npos);
  EXPECT_NE(render("{% set l = [] %}{{ l.append(1) }}").find("SecurityError"), std::string::npos);
  EXPECT_NE(render("{{ 'a' + {} }}").find("TypeError"), std::string::npos);
  std::string e = render("line1\n{% if x %}\n{% endfor %}");
  EXPECT_NE(e.find("PARSE ERROR"), std::string::npos);
  EXPECT_NE(render("{{ x | nosuchfilter }}").find("nosuchfilter"), std::string::npos);
  EXPECT_NE(render("a\nb\n{% unknowntag %}").find("line 3"), std::string::npos);
  EXPECT_NE(render("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}").find("ERROR"), std::string::npos);
  EXPECT_NE(render("{{ " + std::string(1000, '(') + " }}").find("PARSE ERROR"), std::string::npos);
  std::string chain = "{{ 1";
  for (int k = 0; k < 5000; ++k) chain += " + 1";
  EXPECT_NE(render(chain + " }}").find("nested too deeply"), std::string::npos);
  EXPECT_NE(render("{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}"
                   "{% endfor %}{{ ns.s | length }}").find("MemoryError"), std::string::npos);
  EXPECT_NE(render("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}")
                .find("step limit"), std::string::npos);
}

TEST(ChatTemplate, MessagesAndJsonOverload) {
  auto t = ChatTemplate::parse("{% for m in messages %}<{{ m.role }}>{{ m['content'] }}{% endfor %}"
                               "{% if add_generation_prompt %}<assistant>{% endif %}");
  ASSERT_TRUE(t.ok());
  nlohmann::json msgs = nlohmann::json::array({{{"role", "user"}, {"content", "hi"}}});
  auto out = (*t)->render(msgs, true);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(*out, "<user>hi<assistant>");
  EXPECT_FALSE((*t)->render(nlohmann::json::object(), true).ok());
}

}  // namespace
}  // namespace llmrt
