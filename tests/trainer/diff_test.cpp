// volshard diff on run folders written here line by line: what a run writes is
// compared, and each bad input of issue 43 item 18 (a line nested 100,000
// deep, renumbered steps, wrong types, files that are not regular files) is
// refused as bad input (std::invalid_argument: exit status 2) naming the file
// and line, without crashing, hanging or reading without bound.
#include "volshard/trainer/diff.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "io/json_lines.h"

namespace volshard {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

const std::string kLayout = R"({"type": "layout", "buckets": [["w"]]})";

// A step line as `volshard train` writes it, with `field` replaced by `value` (JSON text).
std::string step_line(int64_t step, const std::string& field = "", const std::string& value = "") {
  const std::vector<std::pair<std::string, std::string>> fields{
      {"type", "\"step\""},  {"step", std::to_string(step)}, {"epoch", "0"},      {"world", "1"},
      {"indices", "\"0a\""}, {"augmentation", "\"0b\""},     {"bytes", "\"0c\""}, {"loss", "0.5"},
      {"grads", "[\"aa\"]"}, {"weights", "[\"bb\"]"}};
  std::string line = "{";
  for (const auto& [k, v] : fields)
    line += (line.size() > 1 ? ", \"" : "\"") + k + "\": " + (k == field ? value : v);
  return line + "}";
}

// A run folder: config.json ("{}") and fingerprints.jsonl of `lines`.
std::string run_folder(const std::string& name, const std::vector<std::string>& lines) {
  const fs::path dir = fs::path(::testing::TempDir()) / ("volshard_diff_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << "{}\n";
  std::ofstream prints(dir / "fingerprints.jsonl");
  for (const std::string& line : lines) prints << line << "\n";
  return dir.string();
}

std::string three_steps(const std::string& name) {
  return run_folder(name, {kLayout, step_line(1), step_line(2), step_line(3)});
}

// diff_runs' std::invalid_argument message ("(compared)" when it compared).
std::string bad_input(const std::string& a, const std::string& b) {
  try {
    diff_runs(a, b);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(compared)";
}

TEST(DiffTest, EqualRunsAreTheSameAndATornLastLineIsSkipped) {
  const std::string a = three_steps("same_a"), b = three_steps("same_b");
  EXPECT_TRUE(diff_runs(a, b).identical);
  // What a killed writer leaves: the last line cut, without its newline.
  std::ofstream(fs::path(b) / "fingerprints.jsonl", std::ios::app) << step_line(4).substr(0, 20);
  EXPECT_TRUE(diff_runs(a, b).identical);
}

TEST(DiffTest, ALineNestedDeepIsBadInputNamingFileAndLine) {
  // The probe's 201 KB line nested 100,000 deep overflowed the stack (SIGSEGV).
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  const std::string a = run_folder("deep_a", {kLayout, step_line(1, "grads", deep)});
  const std::string message = bad_input(a, three_steps("deep_b"));
  EXPECT_THAT(message, HasSubstr("fingerprints.jsonl:2: "));
  EXPECT_THAT(message, HasSubstr("nested deeper than 64 levels"));
}

TEST(DiffTest, StepNumbersAreWholeNumbersFromOneThatIncrease) {
  // A first step renumbered to -5 or 1e300 compared nothing and said "the runs are the same".
  const std::string b = three_steps("steps_b");
  for (const char* first : {"-5", "1e300", "0", "1.5", "\"1\""}) {
    const std::string a =
        run_folder("steps_a", {kLayout, step_line(1, "step", first), step_line(2), step_line(3)});
    const std::string message = bad_input(a, b);
    EXPECT_THAT(message, HasSubstr("fingerprints.jsonl:2: \"step\" must be a whole number from 1"))
        << first;
  }
  const std::string repeated =
      run_folder("steps_repeated", {kLayout, step_line(1), step_line(2), step_line(2)});
  EXPECT_THAT(bad_input(repeated, b),
              HasSubstr("fingerprints.jsonl:4: step 2 follows step 2: steps must increase"));
}

TEST(DiffTest, RunsThatFingerprintedOtherStepsAreNotTheSame) {
  // Steps 1, 2 and 7 against 1, 2 and 3: as many steps, not the same ones.
  const std::string a = run_folder("other_a", {kLayout, step_line(1), step_line(2), step_line(7)});
  const RunDiff d = diff_runs(a, three_steps("other_b"));
  EXPECT_FALSE(d.identical);
  EXPECT_THAT(d.cause, HasSubstr("other steps"));
}

TEST(DiffTest, WrongTypesAreBadInputNamingFileLineAndField) {
  const std::string b = three_steps("types_b");
  const std::vector<std::pair<std::string, std::string>> cases{
      {step_line(1, "world", "\"two\""),
       "fingerprints.jsonl:2: \"world\" must be a whole number from 1"},
      {step_line(1, "epoch", "-1"),
       "fingerprints.jsonl:2: \"epoch\" must be a whole number from 0"},
      {step_line(1, "indices", "7"), "fingerprints.jsonl:2: \"indices\" must be a string"},
      {step_line(1, "loss", "\"x\""), "fingerprints.jsonl:2: \"loss\" must be a number or null"},
      {step_line(1, "grads", "\"aa\""),
       "fingerprints.jsonl:2: \"grads\" must be a list of strings"},
      {step_line(1, "weights", "[1]"),
       "fingerprints.jsonl:2: \"weights\" must be a list of strings"},
      {R"({"type": "step", "step": 1})", "fingerprints.jsonl:2: a step line without \"epoch\""},
      {R"({"step": 1})", "fingerprints.jsonl:2: \"type\" must be a string"},
      {"[1, 2]", "fingerprints.jsonl:2: not a JSON object"},
      {"{\"type\": \"st", "fingerprints.jsonl:2: not JSON"},  // torn, but not the last line
  };
  for (const auto& [line, expected] : cases) {
    const std::string a = run_folder("types_a", {kLayout, line, step_line(2)});
    EXPECT_THAT(bad_input(a, b), HasSubstr(expected)) << line;
  }
  const std::string layout = run_folder("types_layout", {R"({"type": "layout", "buckets": 5})"});
  EXPECT_THAT(bad_input(layout, b),
              HasSubstr("fingerprints.jsonl:1: \"buckets\" must be a list of lists of strings"));
  std::ofstream(fs::path(layout) / "config.json") << "[1]";
  EXPECT_THAT(bad_input(layout, b), HasSubstr("config.json: not a JSON object"));
  // config.json is read through the options' table, every key by its row.
  const std::string a = three_steps("types_config");
  for (const auto& [config, expected] : std::vector<std::pair<std::string, std::string>>{
           {R"({"invariant": "yes"})", "config.json: invariant='yes' is not a valid invariant"},
           {R"({"epochs": "five"})", "config.json: epochs='five' is not a valid epochs"},
           {R"({"optimizer": "rmsprop"})", "config.json: optimizer='rmsprop' must be one of adam"},
           {R"({"seed": -1})", "config.json: seed=-1 is not a valid seed"}}) {
    std::ofstream(fs::path(a) / "config.json") << config;
    EXPECT_THAT(bad_input(a, b), HasSubstr(expected)) << config;
  }
  std::ofstream(fs::path(a) / "config.json")
      << R"({"epochs": 5, "seed": 18446744073709551615, "a_later_key": 1})";
  EXPECT_TRUE(diff_runs(a, b).identical);  // a key of another version: the comparison's
}

TEST(DiffTest, FilesThatAreNotRegularAreRefusedBeforeAByteIsRead) {
  const std::string b = three_steps("special_b");
  const std::string a = three_steps("special_a");
  const fs::path prints = fs::path(a) / "fingerprints.jsonl";
  // A directory read as no lines: nothing compared.
  fs::remove(prints);
  fs::create_directory(prints);
  EXPECT_THAT(bad_input(a, b), HasSubstr("fingerprints.jsonl: not a regular file (a directory)"));
  // /dev/zero was read without end.
  fs::remove(prints);
  fs::create_symlink("/dev/zero", prints);
  EXPECT_THAT(bad_input(a, b), HasSubstr("fingerprints.jsonl: not a regular file (a device)"));
  // A FIFO with no writer: opening it waited for one for ever.
  fs::remove(prints);
  ASSERT_EQ(::mkfifo(prints.c_str(), 0600), 0);
  EXPECT_THAT(bad_input(a, b), HasSubstr("fingerprints.jsonl: not a regular file (a FIFO)"));
  fs::remove(prints);
  std::ofstream(prints) << kLayout << "\n" << step_line(1) << "\n";
  // config.json and model.pt are read with the same care.
  fs::remove(fs::path(a) / "config.json");
  ASSERT_EQ(::mkfifo((fs::path(a) / "config.json").c_str(), 0600), 0);
  EXPECT_THAT(bad_input(a, b), HasSubstr("config.json: not a regular file (a FIFO)"));
  fs::remove(fs::path(a) / "config.json");
  std::ofstream(fs::path(a) / "config.json") << "{}\n";
  fs::create_symlink("/dev/zero", fs::path(a) / "model.pt");
  fs::create_symlink("/dev/zero", fs::path(b) / "model.pt");
  EXPECT_THAT(bad_input(a, b), HasSubstr("model.pt: not a regular file (a device)"));
}

TEST(DiffTest, JsonLinesAreReadWithinTheirLimits) {
  const std::string dir = run_folder("limits", {kLayout, step_line(1), step_line(2)});
  const std::string path = (fs::path(dir) / "fingerprints.jsonl").string();
  JsonLinesLimits small;
  small.max_line_bytes = 100;
  try {
    read_json_object_lines(path, small);
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("fingerprints.jsonl:2: a line of "));
    EXPECT_THAT(e.what(), HasSubstr("bytes, longer than the limit of 100"));
  }
  small = {};
  small.max_file_bytes = 100;
  try {
    read_json_object_lines(path, small);
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("bytes, more than the limit of 100"));
  }
  // The lenient reader (repro's) skips what it cannot use, within the same limits.
  std::ofstream(path, std::ios::app) << "not json\n" << std::string(100, '[') << "\n";
  EXPECT_EQ(read_json_lines(path).size(), 3u);
  EXPECT_THROW(read_json_lines(path, small), std::runtime_error);
}

}  // namespace
}  // namespace volshard
