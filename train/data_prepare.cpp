#include "tapegrad/train/data_prepare.hpp"

#include "tapegrad/core/error.hpp"

namespace tapegrad {

TextSplitWriter::TextSplitWriter(const std::filesystem::path& train, const std::filesystem::path& validation,
                                 Options options)
    : options_(std::move(options)), train_(train, 1, 256, options_.op), validation_(validation, 1, 256, options_.op) {
  if (options_.validation_every < 1)
    fail<ValueError>("{}: every {}-th document to validation; give 1 or more", options_.op, options_.validation_every);
  summary_.train_pairs.assign(256 * 256, 0);
}

void TextSplitWriter::write(int stream, std::string_view b) {
  (stream == 0 ? train_ : validation_).append_bytes(b);
  summary_.bytes[stream] += static_cast<Index>(b.size());
  for (const char c : b) {
    const int next = static_cast<unsigned char>(c);
    ++summary_.byte_counts[static_cast<std::size_t>(next)];
    if (stream != 0) continue;
    if (previous_ >= 0) ++summary_.train_pairs[static_cast<std::size_t>(previous_ * 256 + next)];
    previous_ = next;
  }
}

void TextSplitWriter::bytes(std::string_view b) { write(open_stream(), b); }

void TextSplitWriter::end_document() {
  const int stream = open_stream();
  write(stream, options_.separator);
  ++summary_.documents[stream];
}

TextSplitWriter::Summary TextSplitWriter::finish() {
  train_.finish(&validation_);  // both whole on disk before either is in place, then both or neither
  return summary_;
}

}  // namespace tapegrad
