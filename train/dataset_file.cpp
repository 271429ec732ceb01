#include "tapegrad/train/dataset_file.hpp"

#include <algorithm>

#include "tapegrad/autograd/ops.hpp"  // kIgnoreLabel
#include "tapegrad/core/file_io.hpp"

namespace tapegrad {
namespace {

std::vector<std::string_view> split_spaces(std::string_view s) {
  std::vector<std::string_view> out;
  for (std::size_t i = s.find_first_not_of(" \r"); i != std::string_view::npos;) {
    const std::size_t j = std::min(s.find_first_of(" \r", i), s.size());
    out.push_back(s.substr(i, j - i));
    i = s.find_first_not_of(" \r", j);
  }
  return out;
}

// `fixed` = vocabularies come from elsewhere (a training set) and may not grow.
Dataset parse(std::string_view text, std::string_view name, Vocabulary tokens, Vocabulary labels, bool fixed) {
  Dataset data;
  data.name = std::string(name);
  if (!fixed) tokens.add(kPadToken);
  if (text.starts_with("\xEF\xBB\xBF")) text.remove_prefix(3);  // a UTF-8 byte-order mark is not a token
  std::size_t line_no = 0, start = 0;
  // The id of `word` in `vocab`: added to it, or, when the vocabularies are fixed, found in it.
  const auto id_in = [&](Vocabulary& vocab, std::string_view word, const char* what) {
    if (fixed && !vocab.contains(word))
      fail<FormatError>("{}:{}: {} '{}' does not occur in the training data", name, line_no, what, escaped(word));
    return fixed ? vocab.id(word) : vocab.add(word);
  };
  while (start <= text.size()) {
    const std::size_t end = std::min(text.find('\n', start), text.size());
    const std::string_view line = text.substr(start, end - start);
    start = end + 1;  // past the text's end after its last line: the loop ends
    ++line_no;
    if (split_spaces(line).empty() || line.front() == '#') continue;
    const std::size_t tab = line.find('\t');
    if (tab == std::string_view::npos)
      fail<FormatError>("{}:{}: expected tokens, a TAB, then one label per token; this line has no TAB", name, line_no);
    if (line.find('\t', tab + 1) != std::string_view::npos)
      fail<FormatError>("{}:{}: more than one TAB; tokens and labels are separated by exactly one", name, line_no);
    const auto words = split_spaces(line.substr(0, tab));
    const auto tags = split_spaces(line.substr(tab + 1));
    if (words.empty()) fail<FormatError>("{}:{}: no tokens before the TAB", name, line_no);
    if (words.size() != tags.size())
      fail<FormatError>("{}:{}: {} tokens but {} labels; give one label per token ('{}' for none)", name, line_no,
                        words.size(), tags.size(), kNoLabel);
    Example e;
    for (std::size_t k = 0; k < words.size(); ++k) {
      if (words[k] == kPadToken) fail<FormatError>("{}:{}: '{}' is reserved for padding", name, line_no, kPadToken);
      e.tokens.push_back(id_in(tokens, words[k], "token"));
      e.labels.push_back(tags[k] == kNoLabel ? kIgnoreLabel : id_in(labels, tags[k], "label"));
    }
    data.examples.push_back(std::move(e));
  }
  if (data.examples.empty()) fail<FormatError>("{}: no examples (every line is blank or a comment)", name);
  if (data.labelled_positions() == 0) fail<FormatError>("{}: no labels at all: every label is '{}'", name, kNoLabel);
  data.tokens = std::move(tokens);
  data.labels = std::move(labels);
  return data;
}

}  // namespace

Dataset parse_dataset(std::string_view text, std::string_view name) { return parse(text, name, {}, {}, false); }

Dataset parse_dataset(std::string_view text, std::string_view name, const Vocabulary& tokens,
                      const Vocabulary& labels) {
  return parse(text, name, tokens, labels, true);
}

std::string read_dataset_text(const std::filesystem::path& path, double max_memory_bytes, std::size_t max_bytes) {
  // The text itself first: a file larger than the limit is refused before it is read.
  // One size, asked once: a second, throwing file_size in the message would fail as an internal error if
  // the file went in between.
  std::error_code ec;
  if (const auto size = std::filesystem::file_size(path, ec); !ec && static_cast<double>(size) > max_memory_bytes)
    fail<LimitError>("read_dataset: '{}' holds {}, more than the {} the run may take", escaped(path),
                     format_bytes(static_cast<double>(size)), format_bytes(max_memory_bytes));
  std::string text = read_file(path, max_bytes, "read_dataset");
  std::size_t lines = 0, tokens = 0;
  bool in_token = false;
  for (char c : text) {
    const bool blank = c == ' ' || c == '\t' || c == '\r' || c == '\n';
    if (!blank && !in_token) ++tokens;
    in_token = !blank;
    if (c == '\n') ++lines;
  }
  const double memory =
      static_cast<double>(text.size()) + 32.0 * static_cast<double>(tokens) + 128.0 * static_cast<double>(lines);
  if (memory > max_memory_bytes)
    fail<LimitError>(
        "read_dataset: '{}' ({}, {} lines, {} tokens and labels) could take {} to parse, more than the {} "
        "the run may take",
        escaped(path), format_bytes(static_cast<double>(text.size())), lines, tokens, format_bytes(memory),
        format_bytes(max_memory_bytes));
  return text;
}

Dataset read_dataset(const std::filesystem::path& path, std::size_t max_bytes) {
  return parse_dataset(read_file(path, max_bytes, "read_dataset"), escaped(path));
}

Dataset read_dataset(const std::filesystem::path& path, const Vocabulary& tokens, const Vocabulary& labels,
                     std::size_t max_bytes) {
  return parse_dataset(read_file(path, max_bytes, "read_dataset"), escaped(path), tokens, labels);
}

}  // namespace tapegrad
