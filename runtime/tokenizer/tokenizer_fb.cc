#include "runtime/tokenizer/tokenizer_fb.h"

#include "runtime/tokenizer/tokenizer.h"

namespace llmrt {

flatbuffers::Offset<fb::Tokenizer> build_plan_tokenizer(flatbuffers::FlatBufferBuilder& builder,
                                                        const TokenizerData& data) {
  auto model = builder.CreateString(data.model);
  auto pre = builder.CreateString(data.pre);
  auto tokens = builder.CreateVectorOfStrings(data.tokens);
  auto types = builder.CreateVector(data.token_types);
  auto merges = builder.CreateVectorOfStrings(data.merges);
  auto chat_template = builder.CreateString(data.chat_template);
  auto normalizer = builder.CreateString(data.normalizer);
  flatbuffers::Offset<flatbuffers::Vector<float>> scores;
  if (!data.scores.empty()) scores = builder.CreateVector(data.scores);
  fb::TokenizerBuilder tb(builder);
  tb.add_model(model);
  tb.add_pre(pre);
  tb.add_byte_level(data.byte_level);
  tb.add_tokens(tokens);
  tb.add_token_types(types);
  tb.add_merges(merges);
  tb.add_bos_id(data.bos_id);
  tb.add_eos_id(data.eos_id);
  tb.add_pad_id(data.pad_id);
  tb.add_add_bos(data.add_bos);
  tb.add_add_eos(data.add_eos);
  tb.add_chat_template(chat_template);
  tb.add_ignore_merges(data.ignore_merges);
  tb.add_normalizer(normalizer);
  if (!data.scores.empty()) tb.add_scores(scores);
  return tb.Finish();
}

TokenizerData tokenizer_data_from_plan(const fb::Tokenizer& t) {
  TokenizerData d;
  d.model = t.model() != nullptr ? t.model()->str() : std::string("bpe");
  d.pre = t.pre() != nullptr ? t.pre()->str() : std::string();
  d.byte_level = t.byte_level();
  if (t.tokens() != nullptr) {
    d.tokens.reserve(t.tokens()->size());
    for (const flatbuffers::String* s : *t.tokens()) {
      d.tokens.push_back(s != nullptr ? s->str() : std::string());
    }
  }
  if (t.token_types() != nullptr) {
    d.token_types.assign(t.token_types()->begin(), t.token_types()->end());
  }
  if (t.merges() != nullptr) {
    d.merges.reserve(t.merges()->size());
    for (const flatbuffers::String* s : *t.merges()) {
      d.merges.push_back(s != nullptr ? s->str() : std::string());
    }
  }
  d.bos_id = t.bos_id();
  d.eos_id = t.eos_id();
  d.pad_id = t.pad_id();
  d.add_bos = t.add_bos();
  d.add_eos = t.add_eos();
  d.chat_template = t.chat_template() != nullptr ? t.chat_template()->str() : std::string();
  d.ignore_merges = t.ignore_merges();
  d.normalizer = t.normalizer() != nullptr ? t.normalizer()->str() : std::string();
  if (t.scores() != nullptr) d.scores.assign(t.scores()->begin(), t.scores()->end());
  return d;
}

StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::from_plan(const fb::Tokenizer& t) {
  auto result = create(tokenizer_data_from_plan(t));
  if (!result.ok()) return result.status().with_context("plan tokenizer");
  return result;
}

}  // namespace llmrt
