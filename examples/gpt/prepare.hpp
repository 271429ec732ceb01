#pragma once
// Preparing --data once, streaming (nanoGPT's data/<name>/prepare.py): the fortunes of a folder or a file,
// split as text.hpp says, go by once into three files of the --prepared folder, in constant memory:
//
//   train.bin, val.bin   token files (train/data_tokens.hpp) of the two streams' bytes, a byte an id
//   meta.json            what they were made from (the files, their sizes and modification times), the
//                        counts, the byte vocabulary, and how often each byte follows each in the training
//                        stream (the bigram's counts)
//
// A folder that holds the preparation of the same data (the same files, sizes and modification times,
// token files that are the ones meta.json names) is used as it is, its ids checked in one pass (verify)
// that also counts what meta.json claims of them (the fortunes, the byte set, the pairs): a claim they
// contradict is refused naming meta.json and the field. --data may also name a prepared folder itself.
// A preparation is whole or absent: it is built in a folder beside --prepared (".<name>.tmp-<pid>"),
// synced, and swapped with it in one rename (renameat2 RENAME_EXCHANGE), so a refusal, a crash or a full
// disk leaves the earlier one as it was. Preparing takes the folder's lock (.lock), so two runs never
// write it at once; each keeps the files it opened, whatever a later preparation puts there. A --prepared
// folder holds nothing else: one with other files is refused, not written into. One this process may not
// write (read-only) is used if it holds this data's preparation.

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "gpt/text.hpp"

namespace gpt {

struct Prepared {
  std::filesystem::path dir;             // the prepared folder
  std::string source;                    // the --data path it was made from, as meta.json records it
  std::vector<std::string> files;        // the files read, in order
  Index fortunes = 0, empty = 0, train_fortunes = 0, validation_fortunes = 0;
  std::uint64_t text_bytes = 0;          // of the files
  ByteVocabulary vocabulary;
  std::vector<std::uint64_t> train_pairs;  // [a * 256 + b]: how often byte b follows byte a in the training stream
  tapegrad::TokenWindows::File train, validation;
  bool made = false;    // prepared by this call (else found prepared and checked)
  double seconds = 0;   // preparing, or checking the ids
};

inline constexpr std::string_view kMetaFile = "meta.json";

// The data at `data` (a fortune folder or file, or a prepared folder) prepared in `prepared` (unused when
// `data` is a prepared folder). `flag` starts every message: "--data", or where a resumed run's path came
// from. Refusals as read_corpus's were: a missing path, a folder with no file to read, a file that is not
// text (NUL bytes), fewer than 10 fortunes; and a prepared folder whose files are not what meta.json says,
// or whose token files are hostile (TokenFile's checks, naming the file).
// With `may_write` false (a resume's recorded folder), `prepared` is only read: data not prepared there is
// refused, and nothing is written.
Prepared prepare_data(const std::filesystem::path& data, const std::filesystem::path& prepared, std::string_view flag,
                      bool may_write = true);

// Whether `dir` is a prepared folder: a meta.json and gpt's other files alone (whatever meta.json holds:
// reading it says what is wrong with it).
bool is_prepared_folder(const std::filesystem::path& dir);

// Where --data is prepared when --prepared is not given: gpt_data/<name>-<CRC-32 of its absolute path>
// in the working folder (nanoGPT's data/<name>/), so two data sets used from one folder keep theirs.
std::filesystem::path default_prepared(const std::filesystem::path& data);

}  // namespace gpt
