// The compile cache of `llmrt serve MODEL`, driven through a fake `llmc` (a shell script that
// logs its calls and copies a prepared tiny plan to -o): a miss compiles, a second resolve hits,
// touching or resizing a model file or changing the options recompiles, concurrent resolves
// compile once, and a missing or failing compiler gives a clear error.
#include "runtime/serve/model_cache.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "runtime/plan/plan_file.h"
#include "tests/unit/tiny_plan.h"

namespace llmrt {
namespace {

namespace fs = std::filesystem;

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

int count_lines(const fs::path& path) {
  std::ifstream in(path);
  int n = 0;
  for (std::string line; std::getline(in, line);) n += !line.empty();
  return n;
}

class ModelCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "model_cache_test_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    root_ = tmpl;
    plan_ = root_ / "prepared.plan.fb";
    ASSERT_TRUE(testing::write_tiny_plan(testing::make_tiny_plan({}), plan_.string()).ok());
    log_ = root_ / "llmc_calls.log";
    llmc_ = root_ / "bin" / "llmc";
    fs::create_directories(llmc_.parent_path());
    // Fake compiler: logs "compile ARGS..." per compile; FAKE_LLMC_MODE=fail exits 3 after a
    // message on stderr, =garbage writes a non-plan; FAKE_LLMC_SLEEP delays the copy.
    write_text(llmc_,
               "#!/bin/sh\n"
               "if [ \"$1\" = --version ]; then echo 'fake llmc 1.0'; exit 0; fi\n"
               "echo \"$*\" >> '" + log_.string() + "'\n"
               "if [ \"$FAKE_LLMC_MODE\" = fail ]; then echo 'llmc: error: unsupported model' >&2; exit 3; fi\n"
               "out=''\n"
               "while [ $# -gt 0 ]; do if [ \"$1\" = -o ]; then out=\"$2\"; fi; shift; done\n"
               "[ -n \"$FAKE_LLMC_SLEEP\" ] && sleep \"$FAKE_LLMC_SLEEP\"\n"
               "if [ \"$FAKE_LLMC_MODE\" = garbage ]; then echo 'not a plan' > \"$out\"; exit 0; fi\n"
               "cp '" + plan_.string() + "' \"$out\"\n");
    fs::permissions(llmc_, fs::perms::owner_all);

    model_ = root_ / "SmolModel";
    fs::create_directories(model_);
    write_text(model_ / "config.json", "{\"architectures\": [\"LlamaForCausalLM\"]}");
    write_text(model_ / "tokenizer.json", "{}");
    write_text(model_ / "model.safetensors", std::string(3000, 'w'));
    write_text(model_ / "README.md", "not read by the compiler");

    options_.cache_dir = (root_ / "cache").string();
    options_.llmc_path = llmc_.string();
    options_.compile_args = {"--target", "none"};
    options_.quiet = true;
    ::unsetenv("FAKE_LLMC_MODE");
    ::unsetenv("FAKE_LLMC_SLEEP");
  }
  void TearDown() override {
    ::unsetenv("FAKE_LLMC_MODE");
    ::unsetenv("FAKE_LLMC_SLEEP");
    std::error_code ec;
    fs::remove_all(root_, ec);
  }

  int compiles() const { return count_lines(log_); }

  std::vector<std::string> cache_files() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(options_.cache_dir)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }

  fs::path root_, plan_, log_, llmc_, model_;
  ModelCacheOptions options_;
};

TEST_F(ModelCacheTest, PlanFileIsReturnedUnchangedWithoutCompiler) {
  options_.llmc_path = (root_ / "no" / "llmc").string();
  auto r = resolve_plan_path(plan_.string(), options_);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(*r, plan_.string());
  EXPECT_FALSE(fs::exists(options_.cache_dir));
}

TEST_F(ModelCacheTest, MissCompilesThenSecondResolveHits) {
  auto first = resolve_plan_path(model_.string(), options_);
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  EXPECT_EQ(compiles(), 1);
  EXPECT_EQ(fs::path(*first).parent_path(), fs::path(options_.cache_dir));
  EXPECT_TRUE(first->ends_with(".plan.fb")) << *first;
  auto plan = Plan::open(*first);
  EXPECT_TRUE(plan.ok()) << plan.status().to_string();
  // llmc got the model, the temporary output and the extra args.
  std::string call = read_text(log_);
  EXPECT_NE(call.find("compile " + model_.string() + " -o " + *first + ".tmp."), std::string::npos) << call;
  EXPECT_NE(call.find("--target none"), std::string::npos) << call;

  auto second = resolve_plan_path(model_.string(), options_);
  ASSERT_TRUE(second.ok()) << second.status().to_string();
  EXPECT_EQ(*second, *first);
  EXPECT_EQ(compiles(), 1);
  // Nothing half-written left behind: the plan and its lock file only.
  auto names = cache_files();
  ASSERT_EQ(names.size(), 2u);
  EXPECT_TRUE(names[0].ends_with(".lock") || names[1].ends_with(".lock"));
}

TEST_F(ModelCacheTest, HitIsLoggedUnlessQuiet) {
  options_.quiet = false;
  ASSERT_TRUE(resolve_plan_path(model_.string(), options_).ok());
  ::testing::internal::CaptureStderr();
  auto r = resolve_plan_path(model_.string(), options_);
  std::string err = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(r.ok());
  EXPECT_NE(err.find("llmrt: compile cache hit: " + *r), std::string::npos) << err;
}

TEST_F(ModelCacheTest, TouchedOrResizedModelFileRecompiles) {
  auto a = resolve_plan_path(model_.string(), options_);
  ASSERT_TRUE(a.ok());
  // Same bytes, new mtime.
  fs::last_write_time(model_ / "model.safetensors",
                      fs::last_write_time(model_ / "model.safetensors") + std::chrono::seconds(5));
  auto b = resolve_plan_path(model_.string(), options_);
  ASSERT_TRUE(b.ok());
  EXPECT_NE(*a, *b);
  EXPECT_EQ(compiles(), 2);
  // New size (mtime restored to the previous value so only the size differs).
  auto mtime = fs::last_write_time(model_ / "model.safetensors");
  write_text(model_ / "model.safetensors", std::string(3001, 'w'));
  fs::last_write_time(model_ / "model.safetensors", mtime);
  auto c = resolve_plan_path(model_.string(), options_);
  ASSERT_TRUE(c.ok());
  EXPECT_NE(*c, *b);
  EXPECT_NE(*c, *a);
  EXPECT_EQ(compiles(), 3);
  // A file the compiler does not read changes nothing.
  write_text(model_ / "README.md", "edited");
  auto d = resolve_plan_path(model_.string(), options_);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(*d, *c);
  EXPECT_EQ(compiles(), 3);
}

TEST_F(ModelCacheTest, SameSizeAndMtimeButDifferentBytesRecompiles) {
  auto a = resolve_plan_path(model_.string(), options_);
  ASSERT_TRUE(a.ok());
  auto mtime = fs::last_write_time(model_ / "model.safetensors");
  write_text(model_ / "model.safetensors", std::string(3000, 'v'));
  fs::last_write_time(model_ / "model.safetensors", mtime);
  auto b = resolve_plan_path(model_.string(), options_);
  ASSERT_TRUE(b.ok());
  EXPECT_NE(*a, *b);
  EXPECT_EQ(compiles(), 2);
}

TEST_F(ModelCacheTest, CompileArgsAndCompilerArePartOfTheKey) {
  auto a = resolve_plan_path(model_.string(), options_);
  ASSERT_TRUE(a.ok());
  options_.compile_args = {"--target", "none", "--max-model-len", "64"};
  auto b = resolve_plan_path(model_.string(), options_);
  ASSERT_TRUE(b.ok());
  EXPECT_NE(*a, *b);
  EXPECT_EQ(compiles(), 2);
  // A rebuilt compiler (new mtime) invalidates both.
  fs::last_write_time(llmc_, fs::last_write_time(llmc_) + std::chrono::seconds(5));
  auto c = resolve_plan_path(model_.string(), options_);
  ASSERT_TRUE(c.ok());
  EXPECT_NE(*c, *b);
  EXPECT_EQ(compiles(), 3);
}

TEST_F(ModelCacheTest, GgufFileIsCompiled) {
  fs::path gguf = root_ / "model.Q4_1.gguf";
  write_text(gguf, "GGUF" + std::string(100, '\1'));
  auto a = resolve_plan_path(gguf.string(), options_);
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  auto b = resolve_plan_path(gguf.string(), options_);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(*a, *b);
  EXPECT_EQ(compiles(), 1);
  EXPECT_NE(read_text(log_).find("compile " + gguf.string()), std::string::npos);
}

TEST_F(ModelCacheTest, ConcurrentResolvesCompileOnce) {
  ::setenv("FAKE_LLMC_SLEEP", "0.3", 1);
  StatusOr<std::string> r1 = internal_error("unset"), r2 = internal_error("unset");
  std::thread t1([&] { r1 = resolve_plan_path(model_.string(), options_); });
  std::thread t2([&] { r2 = resolve_plan_path(model_.string(), options_); });
  t1.join();
  t2.join();
  ASSERT_TRUE(r1.ok()) << r1.status().to_string();
  ASSERT_TRUE(r2.ok()) << r2.status().to_string();
  EXPECT_EQ(*r1, *r2);
  EXPECT_EQ(compiles(), 1);
  EXPECT_TRUE(Plan::open(*r1).ok());
}

TEST_F(ModelCacheTest, BrokenCachedPlanIsRecompiled) {
  auto a = resolve_plan_path(model_.string(), options_);
  ASSERT_TRUE(a.ok());
  fs::resize_file(*a, fs::file_size(*a) / 2);  // as if the disk filled up under another tool
  auto b = resolve_plan_path(model_.string(), options_);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(*a, *b);
  EXPECT_EQ(compiles(), 2);
  EXPECT_TRUE(Plan::open(*b).ok());
}

TEST_F(ModelCacheTest, MissingCompilerSaysSoAndHowToCompile) {
  options_.llmc_path.clear();
  fs::create_directories(root_ / "empty");
  const char* old = std::getenv("PATH");
  std::string saved = old ? old : "";
  ::setenv("PATH", (root_ / "empty").c_str(), 1);
  auto r = resolve_plan_path(model_.string(), options_);
  ::setenv("PATH", saved.c_str(), 1);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find("not installed"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("llmc compile"), std::string::npos) << r.status().message();

  // Found through $PATH when it is there.
  ::setenv("PATH", llmc_.parent_path().c_str(), 1);
  auto found = find_llmc(options_);
  ::setenv("PATH", saved.c_str(), 1);
  ASSERT_TRUE(found.ok()) << found.status().to_string();
  EXPECT_EQ(*found, llmc_.string());
}

TEST_F(ModelCacheTest, CompilerFailureCarriesExitStatusAndLeavesNoPlan) {
  ::setenv("FAKE_LLMC_MODE", "fail", 1);
  auto r = resolve_plan_path(model_.string(), options_);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("exit status 3"), std::string::npos) << r.status().message();
  for (const std::string& name : cache_files()) EXPECT_FALSE(name.find(".plan.fb") != std::string::npos) << name;

  ::setenv("FAKE_LLMC_MODE", "garbage", 1);
  r = resolve_plan_path(model_.string(), options_);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("no complete plan"), std::string::npos) << r.status().message();
  for (const std::string& name : cache_files()) EXPECT_FALSE(name.find(".plan.fb") != std::string::npos) << name;

  // Once the compiler works, the same model compiles.
  ::unsetenv("FAKE_LLMC_MODE");
  EXPECT_TRUE(resolve_plan_path(model_.string(), options_).ok());
}

TEST_F(ModelCacheTest, BadPathsAreClearErrors) {
  auto missing = resolve_plan_path((root_ / "nope").string(), options_);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);

  fs::create_directories(root_ / "folder");
  auto folder = resolve_plan_path((root_ / "folder").string(), options_);
  ASSERT_FALSE(folder.ok());
  EXPECT_NE(folder.status().message().find("config.json"), std::string::npos);

  write_text(root_ / "notes.txt", "hello");
  auto text = resolve_plan_path((root_ / "notes.txt").string(), options_);
  ASSERT_FALSE(text.ok());
  EXPECT_EQ(text.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(compiles(), 0);
}

TEST_F(ModelCacheTest, DefaultCacheDirFollowsXdg) {
  ModelCacheOptions o;
  const char* old = std::getenv("XDG_CACHE_HOME");
  std::string saved = old ? old : "";
  ::setenv("XDG_CACHE_HOME", (root_ / "xdg").c_str(), 1);
  auto dir = model_cache_dir(o);
  o.llmc_path = llmc_.string();
  o.quiet = true;
  auto plan = resolve_plan_path(model_.string(), o);
  if (old) ::setenv("XDG_CACHE_HOME", saved.c_str(), 1);
  else ::unsetenv("XDG_CACHE_HOME");
  ASSERT_TRUE(dir.ok());
  EXPECT_EQ(*dir, (root_ / "xdg" / "llmc").string());
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  EXPECT_EQ(fs::path(*plan).parent_path(), root_ / "xdg" / "llmc");
}

}  // namespace
}  // namespace llmrt
