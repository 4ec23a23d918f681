// TokenizerData <-> the plan's fb::Tokenizer table (runtime/plan/plan.fbs).
// The compiler's plan writer calls build_plan_tokenizer; Tokenizer::from_plan uses
// tokenizer_data_from_plan.
#pragma once

#include <flatbuffers/flatbuffers.h>

#include "runtime/plan/plan_generated.h"
#include "runtime/tokenizer/tokenizer_data.h"

namespace llmrt {

/// Serializes `data` into `builder` (every TokenizerData field has a table field).
flatbuffers::Offset<fb::Tokenizer> build_plan_tokenizer(flatbuffers::FlatBufferBuilder& builder,
                                                        const TokenizerData& data);

/// Copies a (verified) plan table into TokenizerData; missing fields take their defaults.
TokenizerData tokenizer_data_from_plan(const fb::Tokenizer& t);

}  // namespace llmrt
