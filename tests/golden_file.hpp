#pragma once
// Reads the golden reference files written by tests/data/make_golden*.py: cases of named tensors
// ("input", "mask", "ids", "projection", "output", "grad", "weights" lines, each followed by a line of
// values written with 17 significant digits).

#include <doctest/doctest.h>

#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "tapegrad/core/tensor.hpp"

namespace tapegrad::test {

struct GoldenCase {
  std::vector<std::pair<std::string, TensorD>> inputs;  // in the order the composition takes them
  std::map<std::string, Mask> masks;
  std::map<std::string, Ids> ids;
  TensorD projection, output;
  std::map<std::string, TensorD> grads;
  std::map<std::string, TensorD> weights;  // attention weights, per head
};

inline Shape read_shape(std::istringstream& words) {
  int rank = 0;
  words >> rank;
  Index d[3] = {1, 1, 1};
  for (int k = 0; k < rank; ++k) words >> d[k];
  if (rank == 1) return Shape::vec(d[0]);
  if (rank == 2) return Shape::mat(d[0], d[1]);
  return Shape::batched(d[0], d[1], d[2]);
}

template <class T>
TensorT<T> read_values(std::istream& in, Shape s) {
  std::string line;
  std::getline(in, line);
  std::istringstream values(line);
  TensorT<T> t(s);
  for (Index i = 0; i < t.numel(); ++i) {
    double v = 0;
    const bool read = static_cast<bool>(values >> v);
    REQUIRE_MESSAGE(read, "golden file: too few values for a ", s, " tensor");
    t[i] = static_cast<T>(v);
  }
  return t;
}

inline std::map<std::string, GoldenCase> read_golden(const std::string& file) {
  std::ifstream in(std::string(TAPEGRAD_TEST_DATA) + "/" + file);
  REQUIRE_MESSAGE(in.good(), "cannot open tests/data/", file);
  std::map<std::string, GoldenCase> cases;
  std::string line, current;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream words(line);
    std::string kind, name;
    words >> kind >> name;
    if (kind == "case") {
      current = name;
      continue;
    }
    if (kind == "end") continue;
    GoldenCase& c = cases[current];
    const Shape s = read_shape(words);
    if (kind == "input") c.inputs.emplace_back(name, read_values<double>(in, s));
    else if (kind == "mask") c.masks[name] = read_values<std::uint8_t>(in, s);
    else if (kind == "ids") c.ids[name] = read_values<std::int32_t>(in, s);
    else if (kind == "projection") c.projection = read_values<double>(in, s);
    else if (kind == "output") c.output = read_values<double>(in, s);
    else if (kind == "grad") c.grads[name] = read_values<double>(in, s);
    else if (kind == "weights") c.weights[name] = read_values<double>(in, s);
    else FAIL(file, ": unknown line kind '", kind, "'");
  }
  return cases;
}

}  // namespace tapegrad::test
