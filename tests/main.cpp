// The test runner: doctest's own main, plus the guard of tests/run_cases.hpp.
#define DOCTEST_CONFIG_IMPLEMENT
#include "run_cases.hpp"

int main(int argc, char** argv) {
  doctest::Context context(argc, argv);
  return run_test_cases(context, argc, argv);
}
