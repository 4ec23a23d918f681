#include "runtime/generate/generator.h"

#include <algorithm>

#include "runtime/engine/make_executor.h"
#include "runtime/kv/block_manager.h"
#include "runtime/plan/plan_file.h"

namespace llmrt {

Generator::~Generator() = default;

StatusOr<std::unique_ptr<Generator>> Generator::create(const Plan& plan, const GeneratorOptions& options) {
  ExecutorOptions eo;
  eo.device = options.device;
  eo.cpu = options.executor;
  eo.cuda.memory_utilization = options.gpu_memory_utilization;
  eo.cuda.cuda_graphs = options.cuda_graphs;
  eo.cuda.tiled_attention = options.tiled_attention;
  eo.cuda.gemm_library = options.gemm_library;
  eo.cuda.programmatic_launch = options.programmatic_launch;
  eo.cuda.tensor_core_linear = options.tensor_core_linear;
  eo.cuda.fused_quantize = options.fused_quantize;
  eo.cuda.rope_in_attention = options.rope_in_attention;
  eo.cuda.silu_in_gemv = options.silu_in_gemv;
  eo.cuda.norm_in_gemv = options.norm_in_gemv;
  eo.cuda.device_sampling = options.device_sampling;
  eo.cuda.max_tokens_per_step = options.executor.max_tokens_per_step;
  eo.cuda.max_seqs_per_step = options.executor.max_seqs_per_step;
  eo.cuda.num_kv_blocks = options.executor.num_kv_blocks;
  std::string note;
  ASSIGN_OR_RETURN(std::unique_ptr<Executor> executor, make_executor(plan, eo, &note));
  std::unique_ptr<Generator> g = over(std::move(executor), plan, options.eos_ids);
  g->device_note_ = std::move(note);
  return g;
}

std::unique_ptr<Generator> Generator::over(std::unique_ptr<Executor> executor, const Plan& plan,
                                           std::vector<int32_t> eos_ids) {
  std::unique_ptr<Generator> g(new Generator());
  g->executor_ = std::move(executor);
  g->eos_ids_ = std::move(eos_ids);
  if (g->eos_ids_.empty() && plan.fb().generation() && plan.fb().generation()->eos_ids())
    for (int32_t id : *plan.fb().generation()->eos_ids()) g->eos_ids_.push_back(id);
  return g;
}

int64_t Generator::blocks_needed(const std::vector<GenerationRequest>& requests, int block_size,
                                 int max_model_len) {
  int64_t blocks = 0;
  for (const GenerationRequest& r : requests) {
    int64_t tokens = std::min<int64_t>(static_cast<int64_t>(r.prompt.size()) + std::max(0, r.max_tokens),
                                       max_model_len);
    blocks += (tokens + block_size - 1) / block_size;
  }
  return blocks;
}

namespace {

struct SeqState {
  size_t index = 0;
  int32_t cached = 0;               // tokens in the KV cache
  std::vector<int32_t> pending;     // tokens still to feed
  bool prefill = true;              // pending holds (part of) the prompt
  bool done = false;
};

}  // namespace

StatusOr<std::vector<GenerationOutput>> Generator::generate(const std::vector<GenerationRequest>& requests,
                                                            const TokenCallback& on_token) {
  Executor& ex = *executor_;
  const int vocab = ex.vocab_size();
  const int max_len = ex.max_model_len();
  for (size_t i = 0; i < requests.size(); ++i) {
    const GenerationRequest& r = requests[i];
    const std::string which = "request " + std::to_string(i);
    if (r.prompt.empty()) return invalid_argument(which + ": the prompt is empty");
    if (static_cast<int64_t>(r.prompt.size()) >= max_len)
      return out_of_range(which + ": the prompt has " + std::to_string(r.prompt.size()) +
                          " tokens but the context is " + std::to_string(max_len) +
                          " tokens (at least one must remain for the answer)");
    for (int32_t t : r.prompt)
      if (t < 0 || t >= vocab)
        return invalid_argument(which + ": token id " + std::to_string(t) + " is outside the vocabulary (" +
                                std::to_string(vocab) + ")");
    if (r.max_tokens < 0) return invalid_argument(which + ": max_tokens must not be negative");
    RETURN_IF_ERROR(validate_sampling_params(r.sampling, vocab).with_context(which));
  }
  if (blocks_needed(requests, ex.block_size(), max_len) > ex.num_kv_blocks())
    return resource_exhausted("the requests need " +
                              std::to_string(blocks_needed(requests, ex.block_size(), max_len)) +
                              " KV blocks but the cache has " + std::to_string(ex.num_kv_blocks()));

  BlockManager blocks(ex.num_kv_blocks(), ex.block_size());
  Sampler sampler(vocab);
  std::vector<GenerationOutput> out(requests.size());
  std::vector<SeqState> seqs(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    seqs[i].index = i;
    seqs[i].pending = requests[i].prompt;
    RETURN_IF_ERROR(blocks.add_sequence(static_cast<int64_t>(i)));
    if (requests[i].max_tokens == 0 && !requests[i].want_prompt_logits && !requests[i].want_last_logits) {
      seqs[i].done = true;
      out[i].finish_reason = "length";
    }
    if (requests[i].want_prompt_logits) out[i].prompt_logits.resize(requests[i].prompt.size() * size_t(vocab));
  }

  // Step buffers, reused.
  std::vector<int32_t> tokens, positions, query_start, context_lens, block_tables, logits_indices;
  std::vector<int64_t> kv_slots, slots;
  std::vector<BlockCopy> copies;
  std::vector<LogitsSummary> summaries;
  std::vector<float> row_buf(static_cast<size_t>(vocab)), whole_logits;
  struct RowUse { size_t seq; int32_t prompt_pos; bool sample; };
  std::vector<RowUse> logit_rows;
  std::vector<size_t> step_seqs;
  const int budget = ex.max_tokens_per_step();
  const int max_seqs = ex.max_seqs_per_step();

  for (;;) {
    tokens.clear(); positions.clear(); query_start.assign(1, 0); context_lens.clear();
    kv_slots.clear(); logits_indices.clear(); logit_rows.clear(); step_seqs.clear();
    for (SeqState& s : seqs) {
      if (s.done || s.pending.empty()) continue;
      int room = budget - static_cast<int>(tokens.size());
      if (room <= 0 || static_cast<int>(step_seqs.size()) >= max_seqs) break;
      int n = std::min<int>(room, static_cast<int>(s.pending.size()));
      const GenerationRequest& r = requests[s.index];
      slots.clear(); copies.clear();
      RETURN_IF_ERROR(blocks.append_slots(static_cast<int64_t>(s.index), n, &slots, &copies));
      for (const BlockCopy& c : copies) RETURN_IF_ERROR(ex.copy_kv_block(c.src, c.dst));
      const bool completes = n == static_cast<int>(s.pending.size());
      for (int k = 0; k < n; ++k) {
        int row = static_cast<int>(tokens.size());
        tokens.push_back(s.pending[k]);
        positions.push_back(s.cached + k);
        kv_slots.push_back(slots[k]);
        bool last = completes && k == n - 1;
        if (s.prefill && r.want_prompt_logits) {
          logits_indices.push_back(row);
          logit_rows.push_back({s.index, s.cached + k, last});
        } else if (last) {
          logits_indices.push_back(row);
          logit_rows.push_back({s.index, s.prefill ? s.cached + k : -1, true});
        }
      }
      s.pending.erase(s.pending.begin(), s.pending.begin() + n);
      s.cached += n;
      context_lens.push_back(s.cached);
      query_start.push_back(static_cast<int32_t>(tokens.size()));
      step_seqs.push_back(s.index);
    }
    if (step_seqs.empty()) break;
    int max_blocks = 0;
    for (size_t idx : step_seqs) {
      ASSIGN_OR_RETURN(std::span<const int32_t> table, blocks.block_table(static_cast<int64_t>(idx)));
      max_blocks = std::max<int>(max_blocks, static_cast<int>(table.size()));
    }
    block_tables.assign(step_seqs.size() * size_t(max_blocks), 0);
    for (size_t j = 0; j < step_seqs.size(); ++j) {
      ASSIGN_OR_RETURN(std::span<const int32_t> table, blocks.block_table(static_cast<int64_t>(step_seqs[j])));
      std::copy(table.begin(), table.end(), block_tables.begin() + j * max_blocks);
    }
    summaries.resize(logits_indices.size());
    BatchInput batch;
    batch.tokens = tokens;
    batch.positions = positions;
    batch.kv_slots = kv_slots;
    batch.query_start = query_start;
    batch.context_lens = context_lens;
    batch.block_tables = block_tables;
    batch.max_blocks_per_seq = max_blocks;
    batch.logits_indices = logits_indices;
    // A step that returns prompt logits takes its rows whole (summarizing those would be
    // wasted work) and summarizes the rows it samples from here; the others come back as
    // summaries, a row read only where the summary cannot decide.
    bool whole = false;
    for (const RowUse& use : logit_rows) whole = whole || (use.prompt_pos >= 0 && requests[use.seq].want_prompt_logits);
    if (whole) {
      whole_logits.resize(logit_rows.size() * size_t(vocab));
      RETURN_IF_ERROR(ex.forward(batch, whole_logits.data()));
      for (size_t li = 0; li < logit_rows.size(); ++li)
        if (logit_rows[li].sample) summarize_logits(whole_logits.data() + li * size_t(vocab), vocab, &summaries[li]);
    } else {
      RETURN_IF_ERROR(ex.forward_summary(batch, summaries.data()));
    }

    // A row's draw: its request's settings, its sequence's tokens so far.
    auto context_of = [&](const RowUse& use) {
      SamplingContext ctx;
      ctx.params = &requests[use.seq].sampling;
      ctx.request_id = use.seq;
      ctx.step = out[use.seq].tokens.size();
      ctx.prompt_tokens = requests[use.seq].prompt;
      ctx.output_tokens = out[use.seq].tokens;
      return ctx;
    };
    // The draws the summaries cannot decide, on the device in one launch (a block each), where it
    // samples (a row each, so the contexts are the loop's below).
    std::vector<std::optional<SampleResult>> on_device(logit_rows.size());
    if (!whole && ex.samples_on_device()) {
      std::vector<SamplingContext> contexts;
      std::vector<int32_t> rows;
      for (size_t li = 0; li < logit_rows.size(); ++li) {
        const RowUse& use = logit_rows[li];
        const GenerationRequest& r = requests[use.seq];
        const GenerationOutput& o = out[use.seq];
        if (!use.sample || static_cast<int32_t>(o.tokens.size()) >= r.max_tokens) continue;
        const SamplingContext ctx = context_of(use);
        StatusOr<std::optional<SampleResult>> quick = sampler.sample_from_summary(ctx, summaries[li]);
        if (!quick.ok() || quick->has_value()) continue;  // (the loop reports the error)
        contexts.push_back(ctx);
        rows.push_back(static_cast<int32_t>(li));
      }
      ASSIGN_OR_RETURN(std::vector<std::optional<SampleResult>> drawn,
                       draws_on_device(ex, contexts, rows, summaries));
      for (size_t k = 0; k < rows.size(); ++k) on_device[static_cast<size_t>(rows[k])] = drawn[k];
    }

    for (size_t li = 0; li < logit_rows.size(); ++li) {
      const RowUse& use = logit_rows[li];
      SeqState& s = seqs[use.seq];
      const GenerationRequest& r = requests[use.seq];
      GenerationOutput& o = out[use.seq];
      // Whole rows only where asked for or where the summary cannot decide the draw.
      const std::span<const float> row(row_buf);
      bool row_read = false;
      auto read_row = [&]() -> Status {
        if (row_read) return ok_status();
        if (whole)
          std::copy_n(whole_logits.data() + li * size_t(vocab), vocab, row_buf.data());
        else
          RETURN_IF_ERROR(ex.read_logits(static_cast<int>(li), 1, row_buf.data()));
        row_read = true;
        return ok_status();
      };
      if (s.prefill && use.prompt_pos >= 0 && r.want_prompt_logits) {
        RETURN_IF_ERROR(read_row());
        std::copy(row.begin(), row.end(), o.prompt_logits.begin() + size_t(use.prompt_pos) * vocab);
      }
      if (!use.sample) continue;
      if (s.prefill && r.want_last_logits) {
        RETURN_IF_ERROR(read_row());
        o.last_logits.assign(row.begin(), row.end());
      }
      s.prefill = false;
      if (static_cast<int32_t>(o.tokens.size()) >= r.max_tokens) {
        s.done = true;
        o.finish_reason = "length";
        continue;
      }
      const SamplingContext ctx = context_of(use);
      ASSIGN_OR_RETURN(std::optional<SampleResult> quick, sampler.sample_from_summary(ctx, summaries[li]));
      if (!quick) quick = on_device[li];
      if (!quick) {
        RETURN_IF_ERROR(read_row());
        ASSIGN_OR_RETURN(quick, sampler.sample(ctx, row, {}, &summaries[li]));
      }
      const SampleResult res = *quick;
      o.tokens.push_back(res.token);
      o.logprobs.push_back(res.logprob);
      if (on_token) on_token(use.seq, res.token);
      const bool eos = !r.ignore_eos && std::find(eos_ids_.begin(), eos_ids_.end(), res.token) != eos_ids_.end();
      if (eos) {
        s.done = true;
        o.finish_reason = "stop";
      } else if (static_cast<int32_t>(o.tokens.size()) >= r.max_tokens || s.cached >= max_len) {
        s.done = true;
        o.finish_reason = "length";
      } else {
        s.pending.assign(1, res.token);
      }
    }
  }
  for (size_t i = 0; i < seqs.size(); ++i) RETURN_IF_ERROR(blocks.free_sequence(static_cast<int64_t>(i)));
  return out;
}

}  // namespace llmrt
