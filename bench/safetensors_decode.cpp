// safetensors decode: time and peak memory of decode_safetensors on headers of many small entries, the
// shape of a hostile (or merely large) header within the 100 MB cap. Each case is built in memory and run
// in a child process of its own, so that its peak RSS (getrusage's ru_maxrss) is its own and not the
// largest case's:
//   - N one-element F32 tensors "t<i>", their bytes in the order of their entries (as writers lay them out);
//   - the same, the bytes in reverse order (the decoder sorts them);
//   - M metadata keys "k<i>" mapped to "v".
// The input (header and data) is part of the peak, as it is for a program that reads a file to decode it.
//
//   build/bench/safetensors_decode [--tensors N,...] [--reversed N,...] [--metadata M,...] [--repeats R]
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "command_line.hpp"
#include "tapegrad/train/checkpoint/safetensors.hpp"
#include "timing.hpp"

using namespace tapegrad;

namespace {

enum class Case { tensors, reversed, metadata };

rusage usage_now() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  return usage;
}

double peak_rss_mb() { return static_cast<double>(usage_now().ru_maxrss) / 1024.0; }  // ru_maxrss: KiB on Linux

// User and system CPU seconds this process has used: the decode's own work on a box shared with others,
// where the wall time also counts the waits for a core.
double cpu_seconds() {
  const rusage u = usage_now();
  const auto seconds = [](const timeval& t) { return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) * 1e-6; };
  return seconds(u.ru_utime) + seconds(u.ru_stime);
}

// The file: its header of `count` entries of the case's kind, then the data (4 bytes a tensor). Written in
// place, reserved once, so that building it does not raise the peak above the file's own size.
std::string build_file(Case kind, long count) {
  const auto n = static_cast<std::uint64_t>(count);
  const std::size_t data = kind == Case::metadata ? 0 : 4 * static_cast<std::size_t>(n);
  std::string file(8, '\0');
  file.reserve(8 + static_cast<std::size_t>(n) * 72 + 32 + data);
  file += "{";
  if (kind == Case::metadata) {
    file += R"("__metadata__":{)";
    for (std::uint64_t i = 0; i < n; ++i) fmt::format_to(std::back_inserter(file), R"({}"k{}":"v")", i ? "," : "", i);
    file += "}";
  } else {
    for (std::uint64_t i = 0; i < n; ++i) {
      const std::uint64_t slot = kind == Case::reversed ? n - 1 - i : i;
      fmt::format_to(std::back_inserter(file), R"({}"t{}":{{"dtype":"F32","shape":[1],"data_offsets":[{},{}]}})",
                     i ? "," : "", i, 4 * slot, 4 * slot + 4);
    }
  }
  file += "}";
  const std::uint64_t header = file.size() - 8;
  for (int i = 0; i < 8; ++i) file[static_cast<std::size_t>(i)] = static_cast<char>((header >> (8 * i)) & 0xff);
  file.append(data, '\0');
  return file;
}

// nlohmann's SAX parse with a handler that does nothing: the floor under the decoder's time, which reads the
// header through the same parser.
struct NullHandler {
  using Json = nlohmann::json;
  bool null() { return true; }
  bool boolean(bool) { return true; }
  bool number_integer(Json::number_integer_t) { return true; }
  bool number_unsigned(Json::number_unsigned_t) { return true; }
  bool number_float(Json::number_float_t, const std::string&) { return true; }
  bool string(std::string&) { return true; }
  bool binary(Json::binary_t&) { return true; }
  bool start_object(std::size_t) { return true; }
  bool key(std::string&) { return true; }
  bool end_object() { return true; }
  bool start_array(std::size_t) { return true; }
  bool end_array() { return true; }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) { return false; }
};

// One case, in the calling process: prints one line.
void run_case(Case kind, long count, int repeats) {
  const std::string file = build_file(kind, count);
  const double before_mb = peak_rss_mb();
  std::size_t decoded = 0;
  std::vector<double> wall, cpu;
  for (int r = 0; r < repeats; ++r) {
    const auto start = bench::Clock::now();
    const double cpu_start = cpu_seconds();
    const SafetensorsView view = decode_safetensors(std::as_bytes(std::span<const char>(file)), "bench");
    decoded = kind == Case::metadata ? view.metadata.size() : view.tensors.size();
    cpu.push_back(cpu_seconds() - cpu_start);
    wall.push_back(bench::seconds_since(start));  // the view's release is not the decode's
  }
  if (decoded != static_cast<std::size_t>(count))
    throw std::runtime_error(fmt::format("decoded {} of {} entries", decoded, count));
  const double peak_mb = peak_rss_mb();
  const std::size_t header_bytes = file.size() - 8 - (kind == Case::metadata ? 0 : 4 * static_cast<std::size_t>(count));
  const double header_mb = static_cast<double>(header_bytes) / 1e6;
  const double parse_alone = bench::median_seconds(repeats, 1, [&] {
    NullHandler handler;
    if (!nlohmann::json::sax_parse(file.data() + 8, file.data() + 8 + header_bytes, &handler))
      throw std::runtime_error("the header is not JSON");
  });
  const char* what = kind == Case::metadata ? "metadata keys         " : kind == Case::reversed ? "tensors, bytes reversed"
                                                                                              : "tensors, bytes in order";
  fmt::print("{:>9} {}  header {:5.1f} MB  decode {:6.3f} s ({:6.3f} s CPU; parse alone {:6.3f} s)  peak RSS {:6.1f} MB "
             "= {:4.2f} x header ({:5.1f} MB before decoding)\n",
             count, what, header_mb, bench::median(wall), bench::median(cpu), parse_alone, peak_mb, peak_mb / header_mb,
             before_mb);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Time and peak memory of decode_safetensors on headers of many one-element tensors or metadata keys"};
  std::vector<long> tensors = {10'000, 100'000, 1'000'000}, reversed = {1'000'000}, metadata = {1'000'000, 5'000'000};
  int repeats = 3;
  const auto counts = [&](const char* flag, std::vector<long>& into, const char* what) {
    app.add_option(flag, into, what)->delimiter(',')->capture_default_str()->check(CLI::Range(1L, 5'000'000L));
  };
  counts("--tensors", tensors, "Tensor counts, bytes in the order of the entries");
  counts("--reversed", reversed, "Tensor counts, bytes in reverse order");
  counts("--metadata", metadata, "Metadata key counts");
  app.add_option("--repeats", repeats, "Timed decodes per case (the median is reported)")->capture_default_str()->check(CLI::Range(1, 100));
  if (const auto stop = examples::parse_command_line(app, "safetensors_decode", argc, argv)) return *stop;

  std::vector<std::pair<Case, long>> cases;
  for (long n : tensors) cases.emplace_back(Case::tensors, n);
  for (long n : reversed) cases.emplace_back(Case::reversed, n);
  for (long n : metadata) cases.emplace_back(Case::metadata, n);
  fmt::print("decode_safetensors, medians of {} decodes; peak RSS includes the input (header and data)\n", repeats);
  std::fflush(stdout);  // before fork: the children would print it again
  int failures = 0;
  for (const auto& [kind, count] : cases) {
    const pid_t child = ::fork();
    if (child == 0) {
      try {
        run_case(kind, count, repeats);
        std::_Exit(0);
      } catch (const std::exception& e) {
        fmt::print(stderr, "safetensors_decode: {}\n", e.what());
        std::_Exit(1);
      }
    }
    int status = 0;
    if (child < 0 || ::waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failures;
  }
  return failures ? 1 : 0;
}
