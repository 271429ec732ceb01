// Memory of a load (docs/performance.md): what one load adds to the process's resident memory. A Linear(D, D)
// float model with --mb MB of weights (D = sqrt(mb 10^6 / 4); its weights and gradients allocated), its
// checkpoint saved to a file and read back, then one load of the kind --load names. "load_peak_mb" is the
// peak resident memory during the load above the resident memory just before it (there malloc_trim hands the
// allocator's free memory back, and writing 5 to /proc/self/clear_refs resets the kernel's peak, VmHWM);
// "process_peak_mb" is the whole process's, the file's writing and reading included. MB are 10^6 bytes. One
// line of JSON:
//
//   build/bench/load_peak [--load load_weights|load_state|restore] [--mb 4] [--dir /tmp]
#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "command_line.hpp"
#include "tapegrad/layers/linear.hpp"
#include "tapegrad/train/checkpoint/checkpoint.hpp"

using namespace tapegrad;

namespace {

// A field of /proc/self/status ("VmRSS", "VmHWM"), in MB (the kernel writes KiB).
double status_mb(const std::string& field) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.starts_with(field + ":")) return std::stod(line.substr(field.size() + 1)) * 1024 / 1e6;
  throw std::runtime_error(fmt::format("/proc/self/status has no {}", field));
}

// The kernel's peak (VmHWM) set back to the resident memory now.
void reset_peak() {
  std::ofstream clear("/proc/self/clear_refs");
  clear << "5";
  clear.flush();
  if (!clear) throw std::runtime_error("cannot write /proc/self/clear_refs, which resets the peak");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"The peak memory one load of a Linear(D, D) float model's checkpoint adds (one line of JSON)"};
  std::string load = "load_weights";
  double mb = 4;
  std::filesystem::path dir = std::filesystem::temp_directory_path();
  app.add_option("--load", load, "The load: load_weights, load_state (the model's) or restore ({{\"model\", model}})")
      ->capture_default_str()
      ->check(CLI::IsMember({"load_weights", "load_state", "restore"}));
  app.add_option("--mb", mb, "The model's weights in MB (10^6 bytes): D = sqrt(mb 10^6 / 4)")
      ->capture_default_str()
      ->check(examples::within(0.001, 4000));
  app.add_option("--dir", dir, "Where the checkpoint's file is written, then removed")
      ->capture_default_str()
      ->check(CLI::ExistingDirectory);
  if (const auto stop = examples::parse_command_line(app, "load_peak", argc, argv)) return *stop;

  try {
    const auto d = static_cast<Index>(std::llround(std::sqrt(mb * 1e6 / 4)));
    Rng rng(1);
    Linear<float> model("", {.in = d, .out = d}, rng);
    const std::filesystem::path file = dir / fmt::format("load_peak-{}.tgck", ::getpid());
    const Checkpoint c = [&] {
      const detail::AtExit removed{[&] {
        std::error_code ignored;
        std::filesystem::remove(file, ignored);
      }};
      save_checkpoint(file, snapshot(model));
      return read_checkpoint(file);
    }();
    model.weight().value.fill(0);  // so that the load has something to change: checked below

    const double process_peak_before = status_mb("VmHWM");
    // Free memory the allocator kept (the file's bytes) back to the kernel: the load's figure is what it holds,
    // not what it takes from memory already resident.
    malloc_trim(0);
    reset_peak();
    const double rss_before = status_mb("VmRSS");
    if (load == "load_weights") {
      load_weights(c, model);
    } else if (load == "load_state") {  // the model's, as restore calls it, without restore's copy to put back
      const detail::StateIndex index(c);
      load_state(model, State::reader(index, std::string(kModelPart)));
    } else {
      restore(c, {{std::string(kModelPart), model}});
    }
    const double peak = status_mb("VmHWM");
    if (!(model.weight().value == std::get<Tensor>(c.find(std::string(kModelPart) + ".weight")->value)))
      throw std::runtime_error("the load left the weights as they were");
    fmt::print(
        "{{\"kind\": \"load_peak\", \"load\": \"{}\", \"weights_mb\": {:.1f}, \"d\": {}, \"rss_before_mb\": {:.1f}, "
        "\"load_peak_mb\": {:.2f}, \"process_peak_mb\": {:.1f}}}\n",
        load, static_cast<double>(d * d) * 4 / 1e6, d, rss_before, peak - rss_before,
        std::max(process_peak_before, peak));
    return 0;
  } catch (const std::exception& e) {
    fmt::print(stderr, "load_peak: {}\n", e.what());
    return 1;
  }
}
