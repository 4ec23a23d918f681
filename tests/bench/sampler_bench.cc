// Host cost of sampling one token from one logits row (runtime/sampler): what a decode step pays
// per sequence after the forward, on every backend. The GPU backend copies back a row's summary
// (logits_summary.h) and draws from it where that is exact; elsewhere it copies the whole row and
// runs Sampler::sample over it. The CPU backend summarizes each row on the host first.
//
//   sampler_bench [--vocab N] [--iters N]
//
// Rows are synthetic (a fixed-seed normal distribution of logits with a few peaks; `--sigma S`
// spreads it): the figures are per draw, averaged over --iters draws of different steps.

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "runtime/sampler/logits_summary.h"
#include "runtime/sampler/sampler.h"

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0, int iters) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count() / iters;
}

}  // namespace

int main(int argc, char** argv) {
  int vocab = 128256, iters = 50;
  float sigma = 3.0f;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--vocab" && i + 1 < argc) vocab = std::atoi(argv[++i]);
    else if (a == "--iters" && i + 1 < argc) iters = std::atoi(argv[++i]);
    else if (a == "--sigma" && i + 1 < argc) sigma = static_cast<float>(std::atof(argv[++i]));
    else {
      std::fprintf(stderr, "usage: sampler_bench [--vocab N] [--iters N] [--sigma S]\n");
      return 2;
    }
  }
  if (vocab < 100 || iters < 1) {
    std::fprintf(stderr, "sampler_bench: --vocab >= 100 and --iters >= 1\n");
    return 2;
  }
  std::mt19937 gen(1);
  std::normal_distribution<float> normal(0.0f, sigma);
  std::vector<float> row(static_cast<size_t>(vocab));
  for (float& x : row) x = normal(gen);
  for (int i = 0; i < 5; ++i) row[static_cast<size_t>(i * 7919 % vocab)] += 4.0f * sigma;  // a few peaks

  llmrt::LogitsSummary summary;
  auto t0 = Clock::now();
  for (int i = 0; i < iters; ++i) llmrt::summarize_logits(row.data(), vocab, &summary);
  std::printf("sampler_bench: vocab %d, logits N(0, %.1f) with 5 peaks, %d draws each\n", vocab, sigma, iters);
  std::printf("  %-44s %8.3f ms\n", "summarize_logits (CPU backend, per row)", ms_since(t0, iters));

  struct Case {
    const char* name;
    float temperature, top_p, min_p;
    int top_k;
  };
  const Case cases[] = {
      {"greedy", 0.0f, 1.0f, 0.0f, 0},
      {"temperature 1 (OpenAI's default)", 1.0f, 1.0f, 0.0f, 0},
      {"temperature 0.6, top_p 0.9 (Llama 3's)", 0.6f, 0.9f, 0.0f, 0},
      {"temperature 1, top_p 0.9", 1.0f, 0.9f, 0.0f, 0},
      {"temperature 1, top_k 40", 1.0f, 1.0f, 0.0f, 40},
      {"temperature 1, top_k 40, top_p 0.9", 1.0f, 0.9f, 0.0f, 40},
      {"temperature 1, min_p 0.05", 1.0f, 1.0f, 0.05f, 0},
  };
  llmrt::Sampler sampler(vocab);
  std::printf("  %-44s %8s %10s %10s\n", "draw", "summary", "from it", "whole row");
  for (const Case& c : cases) {
    llmrt::SamplingParams p;
    p.temperature = c.temperature;
    p.top_p = c.top_p;
    p.min_p = c.min_p;
    p.top_k = c.top_k;
    p.seed = 11;
    llmrt::SamplingContext ctx;
    ctx.params = &p;
    int decided = 0;
    long checksum = 0;
    t0 = Clock::now();
    for (int i = 0; i < iters; ++i) {
      ctx.step = static_cast<uint64_t>(i);
      auto r = sampler.sample_from_summary(ctx, summary);
      if (r.ok() && r->has_value()) ++decided, checksum += (*r)->token;
    }
    const double quick = ms_since(t0, iters);
    t0 = Clock::now();
    for (int i = 0; i < iters; ++i) {
      ctx.step = static_cast<uint64_t>(i);
      auto r = sampler.sample(ctx, row, {}, &summary);
      if (r.ok()) checksum += r->token;
    }
    const double whole = ms_since(t0, iters);
    std::printf("  %-44s %8s %7.3f ms %7.3f ms   (%ld)\n", c.name,
                decided == iters ? "decides" : decided == 0 ? "declines" : "some", quick, whole, checksum % 1000);
  }
  return 0;
}
