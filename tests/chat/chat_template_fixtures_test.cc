// Renders every real chat template in tests/chat/fixtures/ for every stored conversation and
// requires byte equality with jinja2 (as configured by transformers' apply_chat_template).
#include <dirent.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "runtime/chat/chat_template.h"

namespace llmrt {
namespace {

// Templates this engine does not render exactly yet. Keep this list as short as possible; each
// entry says why.
const std::set<std::string> kKnownUnsupported = {
};

std::vector<std::string> fixture_names() {
  std::vector<std::string> names;
  if (DIR* d = opendir(LLMC_CHAT_FIXTURES_DIR)) {
    while (dirent* e = readdir(d)) {
      std::string n = e->d_name;
      if (n.size() > 5 && n.compare(n.size() - 5, 5, ".json") == 0) names.push_back(n.substr(0, n.size() - 5));
    }
    closedir(d);
  }
  std::sort(names.begin(), names.end());
  return names;
}

nlohmann::ordered_json load(const std::string& name) {
  std::ifstream in(std::string(LLMC_CHAT_FIXTURES_DIR) + "/" + name + ".json");
  std::stringstream ss;
  ss << in.rdbuf();
  return nlohmann::ordered_json::parse(ss.str());
}

std::tm pinned_now() {
  std::tm tm{};
  tm.tm_year = 2026 - 1900;
  tm.tm_mon = 0;
  tm.tm_mday = 15;
  tm.tm_hour = 9;
  tm.tm_min = 30;
  tm.tm_wday = 4;  // Thursday
  tm.tm_yday = 14;
  return tm;
}

// Returns "" when every case matches, else a description of the first mismatch.
std::string check_fixture(const nlohmann::ordered_json& fx) {
  auto tmpl = ChatTemplate::parse(fx["template"].get<std::string>());
  if (!tmpl.ok()) {
    bool all_errors = true;
    for (auto& c : fx["cases"]) all_errors &= c.contains("error");
    if (all_errors) return "";  // jinja2 rejects it too (at compile or render time).
    return "parse failed: " + tmpl.status().to_string();
  }
  (*tmpl)->pin_time(pinned_now());
  for (auto& c : fx["cases"]) {
    std::string cname = c["name"].get<std::string>();
    auto out = (*tmpl)->render(c["messages"], c["add_generation_prompt"].get<bool>(), c["extra"]);
    if (c.contains("error")) {
      std::string want = c["error"].get<std::string>();
      if (out.ok()) return cname + ": expected error '" + want + "' but rendered:\n" + *out;
      std::string kind = want.substr(0, want.find(':'));
      std::string got = out.status().message();
      if (got.find(kind + ":") == std::string::npos)
        return cname + ": expected error '" + want + "', got '" + got + "'";
      if (kind == "TemplateError" && got.find(want) == std::string::npos)
        return cname + ": expected error '" + want + "', got '" + got + "'";
      if (out.status().code() != StatusCode::kInvalidArgument) return cname + ": wrong status code";
      continue;
    }
    if (!out.ok()) return cname + ": render failed: " + out.status().to_string();
    std::string want = c["expected"].get<std::string>();
    if (*out != want) {
      size_t k = 0;
      while (k < want.size() && k < out->size() && want[k] == (*out)[k]) ++k;
      size_t from = k > 80 ? k - 80 : 0;
      return cname + ": differs at byte " + std::to_string(k) + "\n--- expected ---\n" +
             want.substr(from, 200) + "\n--- got ---\n" + out->substr(from, 200);
    }
  }
  return "";
}

class ChatTemplateFixtureTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ChatTemplateFixtureTest, RendersLikeJinja2) {
  const std::string& name = GetParam();
  std::string err = check_fixture(load(name));
  if (kKnownUnsupported.count(name)) {
    if (err.empty()) ADD_FAILURE() << name << " now passes: remove it from kKnownUnsupported";
    else GTEST_SKIP() << "known unsupported: " << err;
    return;
  }
  EXPECT_EQ(err, "") << name;
}

INSTANTIATE_TEST_SUITE_P(RealTemplates, ChatTemplateFixtureTest, ::testing::ValuesIn(fixture_names()),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n)
                             if (!isalnum(static_cast<unsigned char>(c))) c = '_';
                           return n;
                         });

// One feature per snippet (tests/chat/snippets.json, made by the same script).
TEST(ChatTemplateSnippets, RenderLikeJinja2) {
  std::ifstream in(std::string(LLMC_CHAT_FIXTURES_DIR) + "/../snippets.json");
  ASSERT_TRUE(in.good());
  std::stringstream ss;
  ss << in.rdbuf();
  auto fx = nlohmann::ordered_json::parse(ss.str());
  ASSERT_GE(fx["snippets"].size(), 50u);
  for (auto& c : fx["snippets"]) {
    std::string src = c["template"].get<std::string>();
    auto t = ChatTemplate::parse(src);
    ASSERT_TRUE(t.ok()) << src << ": " << t.status().to_string();
    (*t)->pin_time(pinned_now());
    auto out = (*t)->render(fx["messages"], true, fx["context"]);
    if (c.contains("error")) {
      std::string want = c["error"].get<std::string>();
      EXPECT_FALSE(out.ok()) << src << " rendered " << (out.ok() ? *out : "");
      if (!out.ok()) {
        std::string kind = want.substr(0, want.find(':'));
        EXPECT_NE(out.status().message().find(kind + ":"), std::string::npos)
            << src << ": want " << want << ", got " << out.status().message();
      }
    } else {
      ASSERT_TRUE(out.ok()) << src << ": " << out.status().to_string();
      EXPECT_EQ(*out, c["expected"].get<std::string>()) << src;
    }
  }
}

TEST(ChatTemplateFixtures, ThereAreFixtures) { EXPECT_GE(fixture_names().size(), 60u); }

}  // namespace
}  // namespace llmrt
