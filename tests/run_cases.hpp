#pragma once
// The test runner: doctest's own run, plus one guard. ctest runs each TEST_CASE by name
// (--test-case=<name>); a name the filter no longer matches (a renamed case, a character the
// discovery splits on) would run nothing and pass. A filtered run that ran no test case fails instead.
// Include once per executable, after #define DOCTEST_CONFIG_IMPLEMENT (tests/main.cpp,
// tests/mpi/test_data_parallel.cpp).
#include <doctest/doctest.h>

#include <cstdio>
#include <string_view>

namespace {

int cases_started = 0;

struct CountCases : doctest::IReporter {
  explicit CountCases(const doctest::ContextOptions&) {}
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats&) override {}
  void test_case_start(const doctest::TestCaseData&) override { ++cases_started; }
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_end(const doctest::CurrentTestCaseStats&) override {}
  void test_case_exception(const doctest::TestCaseException&) override {}
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData&) override {}
  void log_message(const doctest::MessageData&) override {}
  void test_case_skipped(const doctest::TestCaseData&) override {}
};

}  // namespace

REGISTER_LISTENER("count_cases", 1, CountCases);

// doctest's run with the guard; `context` lets a caller set options first.
inline int run_test_cases(doctest::Context& context, int argc, char** argv) {
  const int result = context.run();
  if (context.shouldExit()) return result;  // --help, --list-test-cases, ...
  bool filtered = false;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    filtered |= arg.starts_with("--test-case=") || arg.starts_with("-tc=");
  }
  if (filtered && cases_started == 0) {
    std::fprintf(stderr, "no test case matches the filter: a renamed case, or a name ctest cannot pass through\n");
    return 1;
  }
  return result;
}
