// The converter's entry: the file's header, its payload by format (legacy.cpp, format1.cpp), and a format-1
// training checkpoint's data named as a Trainer names it.
#include "convert/old_checkpoint.hpp"

#include <cstring>
#include <filesystem>
#include <sstream>
#include <string>

#include "convert/legacy.hpp"
#include "tapegrad/core/crc32.hpp"

namespace tapegrad::convert {
namespace {

constexpr char kMagic[8] = {'T', 'G', 'C', 'K', 'P', 'T', '\r', '\n'};
constexpr std::size_t kHeaderBytes = 28;  // magic, format, flags, payload length (u64), CRC-32: as format 3's

template <class U>
U get_le(const std::byte* p) {
  U v = 0;
  for (std::size_t i = 0; i < sizeof(U); ++i) v |= static_cast<U>(std::to_integer<unsigned>(p[i])) << (8 * i);
  return v;
}

// The payload of a file of format 1 or 2, or a FormatError naming why not (without the source).
std::span<const std::byte> payload_of(std::span<const std::byte> bytes, std::uint32_t& format) {
  if (bytes.size() < kHeaderBytes || std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0)
    fail<FormatError>("not a tapegrad checkpoint, or truncated before the end of its {}-byte header", kHeaderBytes);
  format = get_le<std::uint32_t>(bytes.data() + 8);
  if (format == kCheckpointFormat)
    fail<FormatError>("it is a checkpoint of format {} already, as tapegrad {} reads it: nothing to convert",
                      kCheckpointFormat, tapegrad_version());
  if (format != 1 && format != 2)
    fail<FormatError>("format version {} is not one this converter knows (1 and 2: tapegrad 0.1 and 0.2)", format);
  if (const auto flags = get_le<std::uint32_t>(bytes.data() + 12); flags != 0)
    fail<FormatError>("unknown flags {:#x} in the header", flags);
  const auto length = get_le<std::uint64_t>(bytes.data() + 16);
  const std::size_t available = bytes.size() - kHeaderBytes;
  if (length != available)
    fail<FormatError>("the header promises {} payload bytes but {} follow", length, available);
  const auto payload = bytes.subspan(kHeaderBytes);
  const std::uint32_t crc = get_le<std::uint32_t>(bytes.data() + 24), actual = Crc32().add(payload.data(), available).value();
  if (actual != crc)
    fail<FormatError>("checksum mismatch (the header says {:08x}, the payload has {:08x}): the file is corrupt", crc,
                      actual);
  return payload;
}

legacy::File read_payload(std::span<const std::byte> payload, std::uint32_t format) {
  legacy::File f;
  f.format_version = format;
  try {
    legacy::InArchive ar(payload);
    std::uint32_t said = 0;
    ar(said);
    if (said != format) fail<FormatError>("the payload says format {} but the header {}", said, format);
    if (format == 1)
      legacy::load_format1(ar, f);
    else
      legacy::load_format2(ar, f);
    if (ar.bytes_left() != 0) fail<FormatError>("the payload has bytes after the checkpoint");
  } catch (const cereal::Exception& e) {
    fail<FormatError>("{}", e.what());
  } catch (const std::bad_alloc&) {
    fail<FormatError>("it asks for more memory than there is");
  }
  return f;
}

// A format-1 Trainer's part names its data as today's does, once the program's data is the file's.
void name_training_data(Checkpoint& c, const TrainingData& data, std::string_view source) {
  if (const auto it = c.metadata.find("data.fingerprint"); it != c.metadata.end())  // format1.cpp: hexadecimal
    if (std::stoul(it->second, nullptr, 16) != data.examples_crc32)
      fail<FormatError>(
          "convert '{}': the training data differs from the data the checkpoint was trained on "
          "(fingerprint {} in the file, {:08x} now)",
          escaped(std::filesystem::path(source)), escaped(it->second), data.examples_crc32);
  TrainerState t = read_trainer_state(c);
  t.data_fingerprint = data.fingerprint;
  t.eval_fingerprint = data.eval_fingerprint;
  std::erase_if(c.entries, [](const StateEntry& e) { return e.name.starts_with("trainer."); });
  State trainer = State::writer(c.entries, "trainer");
  put_trainer_state(trainer, t);
}

}  // namespace

std::uint32_t examples_crc32(const Dataset& data) {
  Crc32 crc;
  for (const auto& e : data.examples) {
    crc.add_le(static_cast<std::uint32_t>(e.tokens.size()));
    for (auto t : e.tokens) crc.add_le(static_cast<std::uint32_t>(t));
    for (auto l : e.labels) crc.add_le(static_cast<std::uint32_t>(l));
  }
  return crc.value();
}

OldCheckpoint convert_checkpoint(std::span<const std::byte> bytes, std::string_view source, const DataOf& data_of) {
  OldCheckpoint old;
  try {
    const std::span<const std::byte> payload = payload_of(bytes, old.format);  // sets the format first
    old.checkpoint = legacy::convert(read_payload(payload, old.format));
    check_checkpoint(old.checkpoint);
  } catch (const FormatError& e) {
    fail<FormatError>("convert '{}': {}", escaped(std::filesystem::path(source)), e.what());
  }
  if (old.format == 1 && old.checkpoint.has("trainer")) {
    if (!data_of)
      fail<FormatError>(
          "convert '{}': a training checkpoint of tapegrad 0.1 names its data in a way only the trainer "
          "that wrote it reads; convert it with the data at hand",
          escaped(std::filesystem::path(source)));
    name_training_data(old.checkpoint, data_of(old.checkpoint), source);
  }
  return old;
}

}  // namespace tapegrad::convert
