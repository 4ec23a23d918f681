//===- HfConfigTest.cpp - config.json / generation_config.json parsing ----===//

#include "compiler/frontend/Model.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

using namespace llmc;
using json = nlohmann::json;

namespace {

// SmolLM2-135M-Instruct's config.json (abridged to the fields that matter).
json smolConfig() {
  return json::parse(R"({
    "_name_or_path": "HuggingFaceTB/SmolLM2-135M-Instruct",
    "architectures": ["LlamaForCausalLM"],
    "attention_bias": false, "attention_dropout": 0.0, "bos_token_id": 1,
    "eos_token_id": 2, "head_dim": 64, "hidden_act": "silu", "hidden_size": 576,
    "initializer_range": 0.041666666666666664, "intermediate_size": 1536,
    "is_llama_config": true, "max_position_embeddings": 8192, "mlp_bias": false,
    "model_type": "llama", "num_attention_heads": 9, "num_hidden_layers": 30,
    "num_key_value_heads": 3, "pad_token_id": 2, "pretraining_tp": 1,
    "rms_norm_eps": 1e-05, "rope_interleaved": false, "rope_scaling": null,
    "rope_theta": 100000, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
    "transformers_version": "4.42.3", "use_cache": true, "vocab_size": 49152})");
}

std::string errorOf(const json &j) {
  auto c = parseHfConfig(j.dump(), "config.json");
  return c.ok() ? std::string("<ok>") : c.status().message();
}

} // namespace

TEST(HfConfig, SmolLM2) {
  auto c = parseHfConfig(smolConfig().dump(), "config.json");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->architecture, "LlamaForCausalLM");
  EXPECT_EQ(c->name, "HuggingFaceTB/SmolLM2-135M-Instruct");
  EXPECT_EQ(c->hiddenSize, 576);
  EXPECT_EQ(c->numLayers, 30);
  EXPECT_EQ(c->numHeads, 9);
  EXPECT_EQ(c->numKvHeads, 3);
  EXPECT_EQ(c->headDim, 64);
  EXPECT_EQ(c->intermediateSize, 1536);
  EXPECT_EQ(c->vocabSize, 49152);
  EXPECT_EQ(c->maxPositionEmbeddings, 8192);
  EXPECT_EQ(c->rmsNormEps, 1e-5);
  EXPECT_EQ(c->ropeTheta, 100000.0);
  EXPECT_EQ(c->ropeScaling.type, "default");
  EXPECT_TRUE(c->tieWordEmbeddings);
  EXPECT_FALSE(c->attentionBias);
  EXPECT_FALSE(c->qkNorm);
  EXPECT_EQ(c->slidingWindow, 0);
  EXPECT_EQ(c->bosId, 1);
  EXPECT_EQ(c->eosIds, (std::vector<int32_t>{2}));
}

TEST(HfConfig, DefaultsAndDerivedFields) {
  json j = smolConfig();
  for (const char *k : {"head_dim", "num_key_value_heads", "rope_theta", "rms_norm_eps",
                        "tie_word_embeddings", "bos_token_id", "eos_token_id",
                        "max_position_embeddings", "_name_or_path"})
    j.erase(k);
  auto c = parseHfConfig(j.dump(), "config.json");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->headDim, 64); // 576 / 9
  EXPECT_EQ(c->numKvHeads, 9);
  EXPECT_EQ(c->ropeTheta, 10000.0);
  EXPECT_EQ(c->rmsNormEps, 1e-6);
  EXPECT_FALSE(c->tieWordEmbeddings);
  EXPECT_EQ(c->bosId, -1);
  EXPECT_TRUE(c->eosIds.empty());
  EXPECT_EQ(c->maxPositionEmbeddings, 2048);
  EXPECT_EQ(c->name, "");
  // head_dim: null (Mistral writes this) counts as absent.
  j["head_dim"] = nullptr;
  j["eos_token_id"] = {2, 7};
  c = parseHfConfig(j.dump(), "config.json");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->headDim, 64);
  EXPECT_EQ(c->eosIds, (std::vector<int32_t>{2, 7}));
}

TEST(HfConfig, Architectures) {
  json j = smolConfig();
  j["architectures"] = {"Qwen2ForCausalLM"};
  auto qwen2 = parseHfConfig(j.dump(), "c");
  ASSERT_TRUE(qwen2.ok());
  EXPECT_TRUE(qwen2->attentionBias);
  EXPECT_FALSE(qwen2->qkNorm);
  j["architectures"] = {"Qwen3ForCausalLM"};
  auto qwen3 = parseHfConfig(j.dump(), "c");
  ASSERT_TRUE(qwen3.ok());
  EXPECT_FALSE(qwen3->attentionBias);
  EXPECT_TRUE(qwen3->qkNorm);
  j["architectures"] = {"MistralForCausalLM"};
  j["sliding_window"] = 4096;
  auto mistral = parseHfConfig(j.dump(), "c");
  ASSERT_TRUE(mistral.ok());
  EXPECT_EQ(mistral->slidingWindow, 4096);
  j["sliding_window"] = nullptr;
  EXPECT_EQ(parseHfConfig(j.dump(), "c")->slidingWindow, 0);
  j["architectures"] = {"LlamaForCausalLM"};
  j["attention_bias"] = true;
  EXPECT_TRUE(parseHfConfig(j.dump(), "c")->attentionBias);

  j["architectures"] = {"GPTNeoXForCausalLM"};
  auto bad = parseHfConfig(j.dump(), "config.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), llmrt::StatusCode::kUnimplemented);
  EXPECT_EQ(bad.status().message(),
            "config.json: architecture GPTNeoXForCausalLM is not supported "
            "(supported: LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, "
            "Qwen3ForCausalLM)");
}

TEST(HfConfig, QwenSlidingWindow) {
  json j = smolConfig();
  j["architectures"] = {"Qwen2ForCausalLM"};
  j["sliding_window"] = 32768;
  j["use_sliding_window"] = false;
  j["max_window_layers"] = 21;
  EXPECT_EQ(parseHfConfig(j.dump(), "c")->slidingWindow, 0);
  j["use_sliding_window"] = true;
  j["max_window_layers"] = 30; // >= num layers: no layer slides
  EXPECT_EQ(parseHfConfig(j.dump(), "c")->slidingWindow, 0);
  j["max_window_layers"] = 0; // every layer slides
  EXPECT_EQ(parseHfConfig(j.dump(), "c")->slidingWindow, 32768);
  j["max_window_layers"] = 21;
  EXPECT_NE(errorOf(j).find("sliding window on only some layers"), std::string::npos);
}

TEST(HfConfig, RopeScaling) {
  json j = smolConfig();
  j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0},
                       {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0},
                       {"original_max_position_embeddings", 8192}};
  auto c = parseHfConfig(j.dump(), "c");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->ropeScaling.type, "llama3");
  EXPECT_EQ(c->ropeScaling.factor, 8.0);
  EXPECT_EQ(c->ropeScaling.lowFreqFactor, 1.0);
  EXPECT_EQ(c->ropeScaling.highFreqFactor, 4.0);
  EXPECT_EQ(c->ropeScaling.originalMaxPosition, 8192);

  j["rope_scaling"] = {{"type", "linear"}, {"factor", 2}};
  c = parseHfConfig(j.dump(), "c");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->ropeScaling.type, "linear");
  EXPECT_EQ(c->ropeScaling.factor, 2.0);

  j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                       {"high_freq_factor", 4.0}};
  EXPECT_EQ(errorOf(j),
            "config.json: field 'rope_scaling.original_max_position_embeddings' is "
            "missing");
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  EXPECT_NE(errorOf(j).find("rope scaling type 'yarn' is not supported"), std::string::npos);
  j["rope_scaling"] = {{"factor", 4.0}};
  EXPECT_NE(errorOf(j).find("'rope_scaling.rope_type' is missing"), std::string::npos);
  j["rope_scaling"] = "linear";
  EXPECT_NE(errorOf(j).find("'rope_scaling' must be an object or null"), std::string::npos);
}

TEST(HfConfig, MissingAndWrongFieldsAreNamed) {
  for (const char *field : {"hidden_size", "num_hidden_layers", "num_attention_heads",
                            "intermediate_size", "vocab_size", "architectures"}) {
    json j = smolConfig();
    j.erase(field);
    EXPECT_EQ(errorOf(j), std::string("config.json: field '") + field + "' is missing");
  }
  json j = smolConfig();
  j["hidden_size"] = "576";
  EXPECT_EQ(errorOf(j), "config.json: field 'hidden_size' must be an integer, got a string");
  j = smolConfig();
  j["num_hidden_layers"] = 30.5;
  EXPECT_EQ(errorOf(j), "config.json: field 'num_hidden_layers' must be an integer, got a float");
  j = smolConfig();
  j["num_attention_heads"] = 0;
  EXPECT_NE(errorOf(j).find("'num_attention_heads' must be at least 1"), std::string::npos);
  j = smolConfig();
  j["rope_theta"] = "big";
  EXPECT_EQ(errorOf(j), "config.json: field 'rope_theta' must be a number, got a string");
  j = smolConfig();
  j["tie_word_embeddings"] = 1;
  EXPECT_EQ(errorOf(j),
            "config.json: field 'tie_word_embeddings' must be a boolean, got an integer");
  j = smolConfig();
  j["num_key_value_heads"] = 4;
  EXPECT_NE(errorOf(j).find("'num_key_value_heads' (4) must divide"), std::string::npos);
  j = smolConfig();
  j["eos_token_id"] = "2";
  EXPECT_NE(errorOf(j).find("'eos_token_id' must be a token id"), std::string::npos);
  j = smolConfig();
  j["eos_token_id"] = {2, -1};
  EXPECT_NE(errorOf(j).find("negative token id"), std::string::npos);
  j = smolConfig();
  j["eos_token_id"] = 49152;
  EXPECT_NE(errorOf(j).find("outside the vocabulary"), std::string::npos);
  j = smolConfig();
  j["hidden_act"] = "gelu";
  EXPECT_NE(errorOf(j).find("hidden_act 'gelu' is not supported"), std::string::npos);
  j = smolConfig();
  j["architectures"] = "LlamaForCausalLM";
  EXPECT_NE(errorOf(j).find("'architectures' must be a non-empty list"), std::string::npos);
  j = smolConfig();
  j["hidden_size"] = 1ll << 40;
  j.erase("head_dim");
  j["num_attention_heads"] = 1ll << 35;
  j["num_key_value_heads"] = 1ll << 35;
  EXPECT_NE(errorOf(j).find("hidden size 1099511627776 is out of range"), std::string::npos)
      << errorOf(j);
  j = smolConfig();
  j["num_hidden_layers"] = 1000000;
  EXPECT_NE(errorOf(j).find("layer count 1000000 is out of range"), std::string::npos);
  j = smolConfig();
  j["head_dim"] = 63;
  EXPECT_NE(errorOf(j).find("must be even"), std::string::npos);
  EXPECT_EQ(parseHfConfig("{", "config.json").status().message(),
            "config.json: not valid JSON");
  EXPECT_EQ(parseHfConfig("[]", "config.json").status().message(),
            "config.json: not a JSON object");
}

TEST(GenerationConfig, Fields) {
  auto g = parseGenerationConfig(
      R"({"bos_token_id": 128000, "do_sample": true, "eos_token_id": [128001, 128008, 128009],
          "temperature": 0.6, "top_p": 0.9, "top_k": 40, "min_p": 0.05,
          "repetition_penalty": 1.1, "max_new_tokens": 256, "transformers_version": "4.45"})",
      "generation_config.json");
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  EXPECT_EQ(g->eosIds, (std::vector<int32_t>{128001, 128008, 128009}));
  EXPECT_FLOAT_EQ(g->temperature, 0.6f);
  EXPECT_FLOAT_EQ(g->topP, 0.9f);
  EXPECT_EQ(g->topK, 40);
  EXPECT_FLOAT_EQ(g->minP, 0.05f);
  EXPECT_FLOAT_EQ(g->repetitionPenalty, 1.1f);
  EXPECT_EQ(g->maxNewTokens, 256);

  auto minimal = parseGenerationConfig(R"({"bos_token_id": 1, "eos_token_id": 2})", "g");
  ASSERT_TRUE(minimal.ok());
  EXPECT_EQ(minimal->eosIds, (std::vector<int32_t>{2}));
  EXPECT_FLOAT_EQ(minimal->temperature, 1.0f);
  EXPECT_EQ(minimal->topK, 0);

  auto greedy = parseGenerationConfig(R"({"do_sample": false, "temperature": 0.7})", "g");
  ASSERT_TRUE(greedy.ok());
  EXPECT_EQ(greedy->temperature, 0.0f);

  EXPECT_EQ(parseGenerationConfig(R"({"top_k": "40"})", "g").status().message(),
            "g: field 'top_k' must be an integer, got a string");
  EXPECT_NE(parseGenerationConfig(R"({"top_p": 1.5})", "g").status().message().find(
                "'top_p' must be in (0, 1]"),
            std::string::npos);
  EXPECT_FALSE(parseGenerationConfig(R"({"temperature": -1})", "g").ok());
  EXPECT_FALSE(parseGenerationConfig(R"({"do_sample": "no"})", "g").ok());
  EXPECT_FALSE(parseGenerationConfig("nope", "g").ok());
}
