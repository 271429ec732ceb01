// Converts a checkpoint of tapegrad 0.1 (format 1) or 0.2 (format 2), which the library no longer reads, to
// today's format 3: read by the one converter (old_checkpoint.hpp), written by the library's save_checkpoint.
//
//   build/examples/convert_checkpoint old.tgck new.tgck
//   build/examples/train --resume new.tgck      # goes on as the old file's release would have
//
// A training checkpoint of 0.1 (the trainer CLI's: 0.1 knew no other) named its data by the CRC-32 of its
// examples; the converter makes that data again from the file's metadata, as `train --resume` does, checks
// it is the same, and names it as today's Trainer does. Prints one line: what it converted to what.
#include <filesystem>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "command_line.hpp"
#include "convert/old_checkpoint.hpp"
#include "lesson/toy_data.hpp"
#include "tapegrad/core/file_io.hpp"
#include "tapegrad/train/data_source.hpp"
#include "tapegrad/train/program/run_program.hpp"

using namespace tapegrad;

namespace {

int convert_file(const std::string& from, const std::string& to, double max_memory_gb) {
  if (std::filesystem::exists(std::filesystem::symlink_status(to)))
    fail<FileError>("'{}' exists; name a new file for the converted checkpoint", escaped(std::filesystem::path(to)));
  const std::string bytes = read_file(from, kMaxCheckpointBytes, "convert");
  const auto data_of = [&](const Checkpoint& c) {
    const lesson::Data d = lesson::resume_data(c, max_memory_gb);
    return convert::TrainingData{
        .examples_crc32 = convert::examples_crc32(d.train),
        .fingerprint = SequenceSource(d.train).fingerprint(),
        .eval_fingerprint = d.eval.size() > 0 ? std::optional(SequenceSource(d.eval).fingerprint()) : std::nullopt};
  };
  const convert::OldCheckpoint old = convert::convert_checkpoint(std::as_bytes(std::span<const char>(bytes)), from, data_of);
  save_checkpoint(to, old.checkpoint);
  fmt::print("converted '{}' (tapegrad {}, format {}) to '{}' (format {}): {}\n", escaped(std::filesystem::path(from)),
             escaped(old.checkpoint.tapegrad_version), old.format, escaped(std::filesystem::path(to)),
             kCheckpointFormat, quoted_list(old.checkpoint.parts()));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Converts a checkpoint of tapegrad 0.1 or 0.2 (format 1 or 2) to today's format 3"};
  std::string from, to;
  double max_memory_gb = 4;
  app.add_option("old", from, "A checkpoint of format 1 or 2")->required();
  app.add_option("new", to, "The converted checkpoint (a new file)")->required();
  app.add_option("--max-memory", max_memory_gb, "GB that remaking a 0.1 training run's data may take")
      ->check(examples::positive)
      ->capture_default_str();
  if (const auto stop = examples::parse_command_line(app, "convert_checkpoint", argc, argv)) return *stop;
  return run_program("convert_checkpoint", [&] { return convert_file(from, to, max_memory_gb); });
}
