#include "gpt/prepare.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <limits>

#include <nlohmann/json.hpp>

#include "tapegrad/core/error.hpp"
#include "tapegrad/core/file_io.hpp"
#include "tapegrad/train/data_prepare.hpp"

namespace gpt {

using namespace tapegrad;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr Index kMinFortunes = 10;  // fortune 9 is the first validation one
constexpr Index kValidationEvery = 10;
constexpr std::string_view kFormat = "tapegrad gpt prepared data";
constexpr int kFormatVersion = 1;
constexpr std::string_view kTrainFile = "train.bin", kValidationFile = "val.bin", kLockFile = ".lock";
constexpr std::size_t kMaxMetaBytes = std::size_t{16} << 20;  // the pairs are at most 65,536 lines

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// A file of --data as it was when listed: what a later run compares to tell the same data.
struct SourceFile {
  fs::path path;
  std::uint64_t bytes = 0;        // as the system reports it
  std::int64_t modified_ns = 0;
};

SourceFile stat_source(const fs::path& path, std::string_view flag) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) fail<FileError>("{}: cannot open '{}': {}", flag, escaped(path), std::strerror(errno));
  return {path, static_cast<std::uint64_t>(st.st_size), st.st_mtim.tv_sec * std::int64_t{1'000'000'000} + st.st_mtim.tv_nsec};
}

// The files a folder contributes: regular files (or links to one) directly in it, no '.' in the name,
// sorted by the bytes of their names.
std::vector<fs::path> files_of_folder(const fs::path& dir, std::string_view flag) {
  std::vector<fs::path> files;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    std::error_code type_ec;
    if (name.find('.') == std::string::npos && fs::is_regular_file(it->path(), type_ec)) files.push_back(it->path());
  }
  if (ec) fail<FileError>("{}: cannot list the folder '{}': {}", flag, escaped(dir), ec.message());
  std::sort(files.begin(), files.end(),
            [](const fs::path& a, const fs::path& b) { return a.filename().native() < b.filename().native(); });
  if (files.empty())
    fail<FileError>("{}: the folder '{}' holds no file to read (it reads the regular files whose names have no '.')",
                    flag, escaped(dir));
  return files;
}

std::vector<SourceFile> list_source(const fs::path& data, std::string_view flag) {
  std::error_code ec;
  const fs::file_status status = fs::status(data, ec);
  if (ec || !fs::exists(status))
    fail<FileError>("{}: cannot open '{}': {}", flag, escaped(data), ec ? ec.message() : "No such file or directory");
  std::vector<fs::path> paths;
  if (fs::is_directory(status))
    paths = files_of_folder(data, flag);
  else if (fs::is_regular_file(status))
    paths = {data};
  else
    fail<FileError>("{}: '{}' is neither a folder nor a regular file", flag, escaped(data));
  std::vector<SourceFile> files;
  for (const fs::path& p : paths) files.push_back(stat_source(p, flag));
  return files;
}

std::string source_key(const fs::path& data) { return fs::absolute(data).lexically_normal().string(); }

// ---- meta.json ---------------------------------------------------------------------------------------------

json describe_files(const std::vector<SourceFile>& files) {
  json list = json::array();
  for (const SourceFile& f : files)
    list.push_back({{"name", f.path.filename().string()}, {"bytes", f.bytes}, {"modified_ns", f.modified_ns}});
  return list;
}

// What meta.json says, read as a stranger's file: every field checked, FormatError naming the file.
struct Meta {
  std::string source;
  json files;
  bool reusable = false;
  Prepared counts;  // fortunes, files, vocabulary, pairs
  Index train_ids = 0, validation_ids = 0;
  std::uint32_t train_crc = 0, validation_crc = 0;
};

Meta read_meta(const fs::path& dir, std::string_view flag) {
  const fs::path file = dir / kMetaFile;
  Meta m;
  try {
    const json j = json::parse(read_file(file, kMaxMetaBytes, flag));
    if (j.at("format").get<std::string>() != kFormat || j.at("version").get<int>() != kFormatVersion)
      fail<FormatError>("it is not of format '{}' {}", kFormat, kFormatVersion);
    m.source = j.at("source").get<std::string>();
    m.files = j.at("files");
    m.reusable = j.at("reusable").get<bool>();
    Prepared& c = m.counts;
    for (const json& f : m.files) c.files.push_back(f.at("name").get<std::string>());
    c.source = m.source;
    c.fortunes = j.at("fortunes").get<Index>();
    c.empty = j.at("empty").get<Index>();
    c.train_fortunes = j.at("train_fortunes").get<Index>();
    c.validation_fortunes = j.at("validation_fortunes").get<Index>();
    c.text_bytes = j.at("text_bytes").get<std::uint64_t>();
    c.vocabulary = ByteVocabulary::from_hex(j.at("vocabulary").get<std::string>(), "the vocabulary");
    m.train_ids = j.at("train").at("ids").get<Index>();
    m.train_crc = j.at("train").at("ids_crc32").get<std::uint32_t>();
    m.validation_ids = j.at("validation").at("ids").get<Index>();
    m.validation_crc = j.at("validation").at("ids_crc32").get<std::uint32_t>();
    c.train_pairs.assign(256 * 256, 0);
    for (const json& p : j.at("train_pairs")) {
      const int a = p.at(0).get<int>(), b = p.at(1).get<int>();
      if (p.size() != 3 || a < 0 || a > 255 || b < 0 || b > 255) fail<FormatError>("a byte pair is not [a, b, count]");
      c.train_pairs[static_cast<std::size_t>(a * 256 + b)] = p.at(2).get<std::uint64_t>();
    }
  } catch (const json::exception& e) {
    fail<FormatError>("{}: '{}' is not gpt's description of prepared data: {}", flag, escaped(file), e.what());
  } catch (const Error& e) {
    if (dynamic_cast<const FileError*>(&e) || dynamic_cast<const LimitError*>(&e)) throw;
    fail<FormatError>("{}: '{}' is not gpt's description of prepared data: {}", flag, escaped(file), e.what());
  }
  return m;
}

void write_meta(const fs::path& dir, const std::vector<SourceFile>& files, bool reusable, const std::string& source,
                const Prepared& p, const TokenFile& train, const TokenFile& validation, std::string_view flag) {
  json pairs = json::array();
  for (std::size_t k = 0; k < p.train_pairs.size(); ++k)
    if (p.train_pairs[k] > 0) pairs.push_back({k / 256, k % 256, p.train_pairs[k]});
  const json j = {
      {"format", kFormat},
      {"version", kFormatVersion},
      {"split", "fortunes at lines that are exactly %; fortune i to validation when i % 10 == 9; each followed by %\\n"},
      {"source", source},
      {"files", describe_files(files)},
      {"reusable", reusable},
      {"fortunes", p.fortunes},
      {"empty", p.empty},
      {"train_fortunes", p.train_fortunes},
      {"validation_fortunes", p.validation_fortunes},
      {"text_bytes", p.text_bytes},
      {"vocabulary", p.vocabulary.hex()},
      {"train", {{"file", kTrainFile}, {"ids", train.size()}, {"ids_crc32", train.ids_crc32()}}},
      {"validation", {{"file", kValidationFile}, {"ids", validation.size()}, {"ids_crc32", validation.ids_crc32()}}},
      {"train_pairs", pairs},
  };
  write_file(dir / kMetaFile, j.dump() + "\n", Durability::replace, flag);
}

// ---- the folder ----------------------------------------------------------------------------------------------

// The prepared folder held for this process: flock on its .lock while it is prepared or checked.
class FolderLock {
 public:
  FolderLock(const fs::path& dir, std::string_view flag) {
    const fs::path file = dir / kLockFile;
    fd_ = ::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd_ < 0) fail<FileError>("{}: cannot open the lock '{}': {}", flag, escaped(file), std::strerror(errno));
    while (::flock(fd_, LOCK_EX) != 0)
      if (errno != EINTR) fail<FileError>("{}: cannot lock '{}': {}", flag, escaped(file), std::strerror(errno));
  }
  ~FolderLock() { ::close(fd_); }
  FolderLock(const FolderLock&) = delete;
  FolderLock& operator=(const FolderLock&) = delete;

 private:
  int fd_ = -1;
};

bool ours(std::string_view name) {
  for (const std::string_view mine : {kMetaFile, kTrainFile, kValidationFile, kLockFile})
    if (name == mine) return true;
  return false;
}

// Makes `dir` if it is new; refuses one that holds anything but a preparation's files. Under the lock, the
// temporary files of a preparation that did not finish are removed.
void take_folder(const fs::path& dir, bool locked) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir))
    fail<FileError>("--prepared: cannot make the folder '{}': {}", escaped(dir), ec ? ec.message() : "it is not a folder");
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (locked && is_temporary_name(name)) {
      fs::remove(it->path(), ec);
      continue;
    }
    if (!ours(name) && !is_temporary_name(name))
      fail<FileError>("--prepared: '{}' holds '{}', which is not gpt's prepared data; give a new or empty folder, or one "
                      "gpt prepared",
                      escaped(dir), escaped(name));
  }
  if (fs::exists(dir / kMetaFile) && !is_prepared_folder(dir))
    fail<FileError>("--prepared: '{}' holds a {} that gpt did not write; give a new or empty folder, or one gpt prepared",
                    escaped(dir), kMetaFile);
}

// The two token files of a prepared folder, opened and checked against meta.json and, with `verify`, id by
// id (a file gpt did not just write).
void open_token_files(Prepared& p, const Meta& m, std::string_view flag, bool verify) {
  const auto start = std::chrono::steady_clock::now();
  for (const bool train : {true, false}) {
    auto file = std::make_shared<const TokenFile>(p.dir / (train ? kTrainFile : kValidationFile), std::string(flag));
    if (file->width() != 1 || file->vocab() != 256)
      fail<FormatError>("{}: '{}' holds ids of {} bytes in a vocabulary of {}; gpt's prepared files hold bytes (1 byte, "
                        "256)",
                        flag, escaped(file->path()), file->width(), file->vocab());
    const Index ids = train ? m.train_ids : m.validation_ids;
    const std::uint32_t crc = train ? m.train_crc : m.validation_crc;
    if (file->size() != ids || file->ids_crc32() != crc)
      fail<FormatError>("{}: '{}' is not the file {} names ({} ids, CRC-32 {:08x}; it says {} ids, {:08x})", flag,
                        escaped(file->path()), kMetaFile, file->size(), file->ids_crc32(), ids, crc);
    if (verify) file->verify(p.vocabulary.map());
    (train ? p.train : p.validation) = std::move(file);
  }
  p.seconds = seconds_since(start);
}

Prepared from_meta(const fs::path& dir, const Meta& m, std::string_view flag, bool verify) {
  Prepared p = m.counts;
  p.dir = dir;
  open_token_files(p, m, flag, verify);
  return p;
}

// Streams the fortunes into dir's token files and meta.json.
Prepared make(const fs::path& data, const std::vector<SourceFile>& files, const fs::path& dir, std::string_view flag) {
  const auto start = std::chrono::steady_clock::now();
  std::error_code ec;
  fs::remove(dir / kMetaFile, ec);  // no description of files about to be replaced
  struct Streams final : FortuneSplitter::Sink {
    TextSplitWriter& out;
    Index empty = 0;
    explicit Streams(TextSplitWriter& w) : out(w) {}
    void bytes(std::string_view b) override { out.bytes(b); }
    void close(bool is_empty) override {
      if (is_empty)
        ++empty;
      else
        out.end_document();
    }
  };
  TextSplitWriter out(dir / kTrainFile, dir / kValidationFile,
                      {.validation_every = kValidationEvery, .separator = std::string(kSeparator), .op = std::string(flag)});
  Streams streams(out);
  FortuneSplitter splitter(streams);
  Prepared p;
  bool reusable = true;  // every file held what the system said it holds: a later run can tell the same data
  for (const SourceFile& f : files) {
    const std::size_t read = read_file_pieces(f.path, std::numeric_limits<std::size_t>::max(), flag, [&](std::string_view piece) {
      if (piece.find('\0') != std::string_view::npos)
        fail<FormatError>("{}: '{}' is not a text file (it holds NUL bytes)", flag, escaped(f.path));
      splitter.feed(piece);
    });
    splitter.finish();
    reusable = reusable && read == f.bytes;
    p.text_bytes += read;
    p.files.push_back(f.path.filename().string());
  }
  if (out.documents() < kMinFortunes)
    fail<FormatError>("{}: '{}' holds {} fortune{}; every 10th is for validation, so at least {} are needed (fortunes "
                      "are separated by lines that are exactly '%')",
                      flag, escaped(data), out.documents(), out.documents() == 1 ? "" : "s", kMinFortunes);
  const TextSplitWriter::Summary s = out.finish();
  p.dir = dir;
  p.source = source_key(data);
  p.fortunes = out.documents();
  p.empty = streams.empty;
  p.train_fortunes = s.documents[0];
  p.validation_fortunes = s.documents[1];
  p.vocabulary = ByteVocabulary::of_counts(s.byte_counts);
  p.train_pairs = s.train_pairs;
  p.train = std::make_shared<const TokenFile>(dir / kTrainFile, std::string(flag));
  p.validation = std::make_shared<const TokenFile>(dir / kValidationFile, std::string(flag));
  write_meta(dir, files, reusable, p.source, p, *p.train, *p.validation, flag);
  p.made = true;
  p.seconds = seconds_since(start);
  return p;
}

}  // namespace

bool is_prepared_folder(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec) || !fs::is_regular_file(dir / kMetaFile, ec)) return false;
  try {
    const json j = json::parse(read_file(dir / kMetaFile, kMaxMetaBytes));
    return j.is_object() && j.value("format", std::string()) == kFormat;
  } catch (const std::exception&) {
    return false;
  }
}

Prepared prepare_data(const fs::path& data, const fs::path& prepared, std::string_view flag) {
  if (is_prepared_folder(data)) return from_meta(data, read_meta(data, flag), flag, true);
  const std::vector<SourceFile> files = list_source(data, flag);
  take_folder(prepared, false);
  const FolderLock lock(prepared, "--prepared");
  take_folder(prepared, true);
  if (fs::exists(prepared / kMetaFile)) {
    try {
      const Meta m = read_meta(prepared, "--prepared");
      if (m.reusable && m.source == source_key(data) && m.files == describe_files(files))
        return from_meta(prepared, m, flag, true);
    } catch (const FormatError&) {
      // Not this data's preparation after all (a file in it changed): prepared again below.
    }
  }
  return make(data, files, prepared, flag);
}

}  // namespace gpt
