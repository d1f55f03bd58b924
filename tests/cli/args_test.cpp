#include "cli/args.h"

#include <gtest/gtest.h>

namespace ds {
namespace {

const OptionTable k_table = {
    {{"-m", "--model"}, "FILE", "", "the model"},
    {{"--port"}, "N", "8000", "the port"},
    {{"--rate"}, "PER_S", "", "derived from others"},
    {{"--temp"}, "T", "0.8", "temperature"},
    {{"--no-mmap"}, "", "", "a flag"},
};

Result<Args> parse(std::vector<std::string> words) {
  std::vector<char*> argv;
  for (std::string& w : words) argv.push_back(w.data());
  return Args::parse(int(argv.size()), argv.data(), k_table);
}

TEST(Args, AliasesFormsAndPositionals) {
  auto args = parse({"-m", "a.gguf", "--port=9000", "--no-mmap", "word", "--temp", "-0.5"});
  ASSERT_TRUE(args.ok()) << args.message();
  const Args& a = args.value();
  EXPECT_TRUE(a.has("-m"));
  EXPECT_TRUE(a.has("--model"));
  EXPECT_EQ(a.get("--model"), "a.gguf");
  EXPECT_EQ(a.get_int("--port").value(), 9000);
  EXPECT_TRUE(a.has("--no-mmap"));
  EXPECT_DOUBLE_EQ(a.get_float("--temp").value(), -0.5);  // "-0.5" is a value, not an option
  EXPECT_EQ(a.positional(), std::vector<std::string>{"word"});
  EXPECT_EQ(a.spelled("--model"), "-m");  // errors quote the command line
  EXPECT_EQ(a.spelled("--port"), "--port");
  EXPECT_FALSE(a.wants_help());
}

TEST(Args, DefaultsComeFromTheTableOrTheCaller) {
  auto args = parse({});
  ASSERT_TRUE(args.ok());
  const Args& a = args.value();
  EXPECT_FALSE(a.has("--port"));
  EXPECT_EQ(a.get_int("--port").value(), 8000);
  EXPECT_DOUBLE_EQ(a.get_float("--temp").value(), 0.8);
  EXPECT_DOUBLE_EQ(a.get_float("--rate", 12.0).value(), 12.0);
  EXPECT_FALSE(a.get_float("--rate").ok());  // neither given nor defaulted: the error names it
  EXPECT_NE(a.get_float("--rate").message().find("--rate"), std::string::npos);
  EXPECT_FALSE(a.has("--not-in-the-table"));  // a shared group's option this command does not take
}

TEST(Args, ADefaultInTheTableAndInTheCodeIsAProgrammingError) {
  auto args = parse({});
  ASSERT_TRUE(args.ok());
  EXPECT_DEATH((void)args.value().get_int("--port", 1), "--port has its default in the table and another in the code");
}

TEST(Args, RefusalsNameTheOptionAndTheClosest) {
  struct Case {
    std::vector<std::string> words;
    std::string message;
  };
  for (const Case& c : std::vector<Case>{
           {{"--prot", "1"}, "unknown option --prot (did you mean --port?)"},
           {{"--temperature", "1"}, "unknown option --temperature (did you mean --temp?)"},
           {{"--hepl"}, "unknown option --hepl (did you mean --help?)"},
           {{"--qqqqqqqq"}, "unknown option --qqqqqqqq: --help lists them"},
           {{"--port"}, "option --port needs a value (N)"},
           {{"--no-mmap=yes"}, "option --no-mmap is a flag and takes no value"},
       }) {
    auto args = parse(c.words);
    ASSERT_FALSE(args.ok()) << c.words[0];
    EXPECT_NE(args.message().find(c.message), std::string::npos) << args.message();
  }
  auto bad_number = parse({"--port", "80x"});
  ASSERT_TRUE(bad_number.ok());
  EXPECT_EQ(bad_number.value().get_int("--port").message(), "option --port expects an integer, got '80x'");
}

TEST(Args, HelpAnywhereWinsOverEverythingElse) {
  auto args = parse({"--unknown", "-h"});
  ASSERT_TRUE(args.ok());
  EXPECT_TRUE(args.value().wants_help());
}

TEST(Args, AnOptionTwiceInATableIsAProgrammingError) {
  const OptionTable twice = join_options({k_table, {{{"--port"}, "N", "", "again"}}});
  std::vector<char*> none;
  EXPECT_DEATH((void)Args::parse(0, none.data(), twice), "option --port is in the table twice");
}

}  // namespace
}  // namespace ds
