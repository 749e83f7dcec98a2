// The autotune cache's file: choices written and read back, other devices'
// lines kept, a checkpoint's pins before the file's, malformed lines named.
#include "lwrt/autotune.h"

#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <iterator>
#include <string>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

namespace {

namespace fs = std::filesystem;

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

class RuntimeAutotune : public ::testing::Test {
protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("lwcc-autotune-" + std::to_string(::getpid()) + "-" + info->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(RuntimeAutotune, ChoicesSurviveTheRunThatTimedThem) {
  const std::string file = (dir_ / "sub" / "autotune.tsv").string();
  {
    lwrt::AutotuneCache c;
    std::string err;
    ASSERT_TRUE(c.open(file, &err)) << err; // no file yet: an empty cache
    EXPECT_FALSE(c.find("GPU A", "conv.fwd 1").has_value());
    EXPECT_EQ(c.record("GPU A", "conv.fwd 1", "legacy algo=1 math=1", &err),
              "legacy algo=1 math=1");
    EXPECT_EQ(err, "");
    EXPECT_EQ(c.record("GPU A", "conv.bwd-filter 1", "legacy algo=5 math=0", &err),
              "legacy algo=5 math=0");
    // Another device of the run timed the same configuration after the
    // first: it takes the first's choice.
    EXPECT_EQ(c.record("GPU A", "conv.fwd 1", "legacy algo=0 math=1", &err),
              "legacy algo=1 math=1");
    EXPECT_EQ(c.timed(), 2);
    EXPECT_EQ(c.found(), 0);
  }
  ASSERT_TRUE(fs::exists(file)); // its folder made too
  lwrt::AutotuneCache next;
  std::string err;
  ASSERT_TRUE(next.open(file, &err)) << err;
  EXPECT_EQ(next.find("GPU A", "conv.fwd 1").value_or(""), "legacy algo=1 math=1");
  EXPECT_EQ(next.find("GPU A", "conv.bwd-filter 1").value_or(""), "legacy algo=5 math=0");
  // Another GPU (or other library versions) does not take them.
  EXPECT_FALSE(next.find("GPU B", "conv.fwd 1").has_value());
  EXPECT_EQ(next.found(), 2);
  // What the run used, in the file's form: a checkpoint's record.
  EXPECT_EQ(next.usedText(), "GPU A\tconv.bwd-filter 1\tlegacy algo=5 math=0\n"
                             "GPU A\tconv.fwd 1\tlegacy algo=1 math=1\n");
}

TEST_F(RuntimeAutotune, KeepsWhatOtherRunsWroteMeanwhile) {
  const std::string file = (dir_ / "autotune.tsv").string();
  fs::create_directories(dir_);
  lwrt::AutotuneCache a, b;
  std::string err;
  ASSERT_TRUE(a.open(file, &err)) << err;
  ASSERT_TRUE(b.open(file, &err)) << err;
  a.record("GPU A", "x", "graph engine=1", &err);
  ASSERT_EQ(err, "");
  b.record("GPU B", "y", "graph engine=0", &err);
  ASSERT_EQ(err, "");
  std::string text = slurp(file);
  EXPECT_NE(text.find("GPU A\tx\tgraph engine=1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("GPU B\ty\tgraph engine=0\n"), std::string::npos) << text;
  EXPECT_EQ(text.rfind('#', 0), 0u) << "a comment line heads the file";
}

TEST_F(RuntimeAutotune, ACheckpointsChoicesComeFirst) {
  const std::string file = (dir_ / "autotune.tsv").string();
  fs::create_directories(dir_);
  std::ofstream(file) << "# a comment\n\nGPU A\tx\tgraph engine=3\nGPU A\tz\tgraph engine=1\n";
  lwrt::AutotuneCache c;
  std::string err;
  ASSERT_TRUE(c.open(file, &err)) << err;
  ASSERT_TRUE(c.pin("GPU A\tx\tgraph engine=0\n", "ckpt-3.lwckpt", &err)) << err;
  EXPECT_EQ(c.find("GPU A", "x").value_or(""), "graph engine=0");
  EXPECT_EQ(c.find("GPU A", "z").value_or(""), "graph engine=1");
  // A choice the library no longer takes is forgotten, then timed again.
  c.drop("GPU A", "x");
  EXPECT_FALSE(c.find("GPU A", "x").has_value());
  EXPECT_EQ(c.record("GPU A", "x", "graph engine=2", &err), "graph engine=2");
  ASSERT_EQ(err, "");
  EXPECT_NE(slurp(file).find("GPU A\tx\tgraph engine=2\n"), std::string::npos);
  EXPECT_FALSE(c.pin("GPU A x graph\n", "ckpt-3.lwckpt", &err));
  EXPECT_NE(err.find("ckpt-3.lwckpt:1:"), std::string::npos) << err;
}

// The ranks of an mpirun on one machine write one cache at once: each
// replaces the file whole (a temporary file of its own), so it always reads
// back, whoever wrote last.
TEST_F(RuntimeAutotune, ProcessesWritingAtOnceLeaveAWholeFile) {
  const std::string file = (dir_ / "autotune.tsv").string();
  fs::create_directories(dir_);
  std::vector<pid_t> children;
  for (int rank = 0; rank < 2; ++rank) {
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      lwrt::AutotuneCache c;
      std::string err;
      bool ok = c.open(file, &err);
      for (int k = 0; ok && k < 40; ++k) {
        c.record("GPU " + std::to_string(rank), "conv " + std::to_string(k),
                 "legacy algo=" + std::to_string(k % 7) + " math=0", &err);
        ok = err.empty();
      }
      ::_exit(ok ? 0 : 1);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  lwrt::AutotuneCache c;
  std::string err;
  ASSERT_TRUE(c.open(file, &err)) << err;
  // The last writer's own choices are all there.
  int whole = 0;
  for (int rank = 0; rank < 2; ++rank) {
    int found = 0;
    for (int k = 0; k < 40; ++k)
      found += c.find("GPU " + std::to_string(rank), "conv " + std::to_string(k)).has_value();
    whole += found == 40;
  }
  EXPECT_GE(whole, 1);
  for (const auto& e : fs::directory_iterator(dir_))
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos)
        << "a temporary file is left: " << e.path();
}

TEST_F(RuntimeAutotune, AMalformedLineIsNamed) {
  const std::string file = (dir_ / "autotune.tsv").string();
  fs::create_directories(dir_);
  std::ofstream(file) << "GPU A\tx\tgraph engine=3\nGPU A\tonly two fields\n";
  lwrt::AutotuneCache c;
  std::string err;
  EXPECT_FALSE(c.open(file, &err));
  EXPECT_NE(err.find(file + ":2:"), std::string::npos) << err;
  EXPECT_FALSE(c.isOpen());
}

} // namespace
