#include "gpt/prepare.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdio>  // renameat2
#include <cstring>
#include <limits>
#include <span>
#include <sstream>
#include <utility>

#include <nlohmann/json.hpp>

#include "tapegrad/core/crc32.hpp"
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

// A field's integer read at its own width: FormatError naming the field for anything but an integer in
// [least, T's largest] (a fraction, a string, 4294967306 for a byte).
template <class T>
T integer(const json& j, std::string_view field, T least = std::numeric_limits<T>::min()) {
  const bool unsigned_fits = j.is_number_unsigned() && std::in_range<T>(j.get<std::uint64_t>());
  if (unsigned_fits || (j.is_number_integer() && !j.is_number_unsigned() && std::in_range<T>(j.get<std::int64_t>()))) {
    const T v = unsigned_fits ? static_cast<T>(j.get<std::uint64_t>()) : static_cast<T>(j.get<std::int64_t>());
    if (v >= least) return v;
  }
  fail<FormatError>("'{}' is {}, not an integer from {} to {}", field, escaped(j.dump(), 40), least,
                    std::numeric_limits<T>::max());
}

// A claim of meta.json that its token files (or its other fields) contradict.
[[noreturn]] void lie(const fs::path& dir, std::string_view flag, const std::string& what) {
  fail<FormatError>("{}: '{}' does not describe its token files: {}", flag, escaped(dir / kMetaFile), what);
}

Meta read_meta(const fs::path& dir, std::string_view flag) {
  const fs::path file = dir / kMetaFile;
  Meta m;
  Prepared& c = m.counts;
  std::uint64_t listed = 0;  // the bytes of the files it lists
  try {
    std::istringstream in(read_file(file, kMaxMetaBytes, flag));
    json j;
    in >> j;  // one JSON value, as json::parse reads it; bytes after it are refused here, named
    if ((in >> std::ws).peek() != std::char_traits<char>::eof())
      fail<FormatError>("it holds bytes after its JSON value (from byte {})", static_cast<std::int64_t>(in.tellg()));
    if (!j.is_object()) fail<FormatError>("it is not a JSON object (it is {} {})", j.is_array() ? "an" : "a", j.type_name());
    if (j.at("format").get<std::string>() != kFormat || integer<int>(j.at("version"), "version") != kFormatVersion)
      fail<FormatError>("it is not of format '{}' {}", kFormat, kFormatVersion);
    m.source = j.at("source").get<std::string>();
    m.files = j.at("files");
    m.reusable = j.at("reusable").get<bool>();
    for (const json& f : m.files) {
      c.files.push_back(f.at("name").get<std::string>());
      const auto bytes = integer<std::uint64_t>(f.at("bytes"), "files.bytes");
      (void)integer<std::int64_t>(f.at("modified_ns"), "files.modified_ns");
      listed = bytes > std::numeric_limits<std::uint64_t>::max() - listed ? listed : listed + bytes;
    }
    if (c.files.empty()) fail<FormatError>("'files' lists no file");
    c.source = m.source;
    c.fortunes = integer<Index>(j.at("fortunes"), "fortunes", 0);
    c.empty = integer<Index>(j.at("empty"), "empty", 0);
    c.train_fortunes = integer<Index>(j.at("train_fortunes"), "train_fortunes", 0);
    c.validation_fortunes = integer<Index>(j.at("validation_fortunes"), "validation_fortunes", 0);
    c.text_bytes = integer<std::uint64_t>(j.at("text_bytes"), "text_bytes");
    c.vocabulary = ByteVocabulary::from_hex(j.at("vocabulary").get<std::string>(), "'vocabulary'");
    m.train_ids = integer<Index>(j.at("train").at("ids"), "train.ids", 1);
    m.train_crc = integer<std::uint32_t>(j.at("train").at("ids_crc32"), "train.ids_crc32");
    m.validation_ids = integer<Index>(j.at("validation").at("ids"), "validation.ids", 1);
    m.validation_crc = integer<std::uint32_t>(j.at("validation").at("ids_crc32"), "validation.ids_crc32");
    c.train_pairs.assign(256 * 256, 0);
    for (const json& p : j.at("train_pairs")) {
      if (!p.is_array() || p.size() != 3) fail<FormatError>("'train_pairs' holds {}, not [a, b, count]", escaped(p.dump(), 40));
      const int a = integer<std::uint8_t>(p[0], "train_pairs"), b = integer<std::uint8_t>(p[1], "train_pairs");
      c.train_pairs[static_cast<std::size_t>(a * 256 + b)] = integer<std::uint64_t>(p[2], "train_pairs");
    }
  } catch (const json::exception& e) {  // "[json.exception.parse_error.101] parse error at ...": what follows "] "
    const std::string_view what = e.what();
    fail<FormatError>("{}: '{}' is not gpt's description of prepared data: {}", flag, escaped(file),
                      escaped(what.substr(std::min(what.size(), what.find("] ") + 2)), 200));
  } catch (const Error& e) {
    if (dynamic_cast<const FileError*>(&e) || dynamic_cast<const LimitError*>(&e)) throw;
    fail<FormatError>("{}: '{}' is not gpt's description of prepared data: {}", flag, escaped(file), e.what());
  }
  // What the counts say of each other: every fortune is a training or a validation one, every 10th for
  // validation, and the streams hold the text's bytes and a separator after each fortune.
  if (c.train_fortunes + c.validation_fortunes != c.fortunes || c.validation_fortunes != c.fortunes / kValidationEvery)
    lie(dir, flag,
        fmt::format("'fortunes' is {}, 'train_fortunes' {} and 'validation_fortunes' {}; every {}th fortune is for "
                    "validation",
                    c.fortunes, c.train_fortunes, c.validation_fortunes, kValidationEvery));
  if (m.reusable && c.text_bytes != listed)
    lie(dir, flag, fmt::format("'text_bytes' is {}, but the files it lists hold {} bytes", c.text_bytes, listed));
  const auto streams = static_cast<std::uint64_t>(m.train_ids) + static_cast<std::uint64_t>(m.validation_ids);
  const std::uint64_t added = c.files.size() + kSeparator.size() * static_cast<std::uint64_t>(c.fortunes);  // '\n's too
  if (streams > added && streams - added > c.text_bytes)
    lie(dir, flag,
        fmt::format("'text_bytes' is {}, fewer than the {} bytes of the token files, less a separator a fortune",
                    c.text_bytes, streams));
  return m;
}

// What a token file holds, counted in the pass that checks every id: the bytes that occur, its fortunes
// (each followed by the separator, a line that is exactly "%"), and, for the training file, which byte
// follows which.
struct StreamCounts {
  std::array<bool, 256> occurs{};
  Index fortunes = 0;
  std::vector<std::uint64_t> pairs;  // [a * 256 + b], the training file's; empty for the validation file
  int previous = -1;
  bool line_start = true, percent = false;  // the last byte ended a line; the line so far is "%"

  void add(std::span<const std::int32_t> ids) {  // on locals: a store to `pairs` could otherwise be `fortunes`
    std::uint64_t* const pair = pairs.empty() ? nullptr : pairs.data();
    Index n = fortunes;
    int before = previous;
    bool start = line_start, after_percent = percent;
    for (const std::int32_t b : ids) {
      occurs[static_cast<std::size_t>(b)] = true;
      n += after_percent && b == '\n';
      after_percent = start && b == '%';
      start = b == '\n';
      if (pair && before >= 0) ++pair[static_cast<std::size_t>(before * 256 + b)];
      before = b;
    }
    fortunes = n;
    previous = before;
    line_start = start;
    percent = after_percent;
  }
};

// meta.json's claims against what the pass over the token files counted: a lie names the field.
void check_claims(const Prepared& p, const StreamCounts& train, const StreamCounts& validation, std::string_view flag) {
  const auto file = [&](bool t) { return escaped(p.dir / (t ? kTrainFile : kValidationFile)); };
  for (const bool t : {true, false})
    if (const StreamCounts& s = t ? train : validation; s.fortunes != (t ? p.train_fortunes : p.validation_fortunes))
      lie(p.dir, flag,
          fmt::format("'{}' is {}, but '{}' holds {} fortunes", t ? "train_fortunes" : "validation_fortunes",
                      t ? p.train_fortunes : p.validation_fortunes, file(t), s.fortunes));
  for (int b = 0; b < 256; ++b)
    if (p.vocabulary.contains(static_cast<unsigned char>(b)) && !train.occurs[b] && !validation.occurs[b])
      lie(p.dir, flag, fmt::format("'vocabulary' has the byte 0x{:02x}, which neither '{}' nor '{}' holds", b, file(true),
                                   file(false)));
  for (std::size_t k = 0; k < train.pairs.size(); ++k)
    if (train.pairs[k] != p.train_pairs[k])
      lie(p.dir, flag,
          fmt::format("'train_pairs' says the byte 0x{:02x} follows 0x{:02x} {} times; '{}' holds it {} times", k % 256,
                      k / 256, p.train_pairs[k], file(true), train.pairs[k]));
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
  write_file(dir / kMetaFile, j.dump() + "\n", Durability::durable, flag);
}

// ---- the folder ----------------------------------------------------------------------------------------------

// The prepared folder held for this process: flock on its .lock while it is prepared or checked. A
// preparation swapped in while this process waited brings its own .lock: the one taken is the folder's.
class FolderLock {
 public:
  FolderLock(const fs::path& dir, std::string_view flag) {
    const fs::path file = dir / kLockFile;
    for (;;) {
      fd_ = ::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
      if (fd_ < 0) fail<FileError>("{}: cannot open the lock '{}': {}", flag, escaped(file), std::strerror(errno));
      while (::flock(fd_, LOCK_EX) != 0)
        if (errno != EINTR) fail<FileError>("{}: cannot lock '{}': {}", flag, escaped(file), std::strerror(errno));
      struct stat held {}, named {};
      if (::fstat(fd_, &held) == 0 && ::stat(file.c_str(), &named) == 0 && held.st_ino == named.st_ino &&
          held.st_dev == named.st_dev)
        return;
      ::close(fd_);
    }
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

// Why an entry of a --prepared folder is not gpt's (" (a folder)", " (a link)", or "" for a file of another
// name), or nullptr when it is gpt's: a plain file of gpt's names or of a temporary's. A folder or a link
// of those names is someone else's, and the earlier preparation is removed whole once a new one is swapped
// in. One gone since it was listed (another run's swap, before the lock) is nobody's.
const char* not_gpts(const fs::directory_entry& entry) {
  const std::string name = entry.path().filename().string();
  std::error_code ec;
  const fs::file_type type = entry.symlink_status(ec).type();
  if (type != fs::file_type::regular && type != fs::file_type::not_found)
    return type == fs::file_type::directory ? " (a folder)"
           : type == fs::file_type::symlink ? " (a link)"
                                            : " (not a regular file)";
  return ours(name) || is_temporary_name(name) ? nullptr : "";
}

// Whether `dir`'s meta.json says gpt wrote it (its "format"), whatever else it holds.
bool written_by_gpt(const fs::path& dir) {
  try {
    const json j = json::parse(read_file(dir / kMetaFile, kMaxMetaBytes));
    return j.is_object() && j.value("format", std::string()) == kFormat;
  } catch (const std::exception&) {
    return false;
  }
}

// The folder a new preparation of `dir` is built in, beside it: ".<name>.tmp-<pid>".
fs::path building_folder(const fs::path& dir) {
  const fs::path d = fs::absolute(dir).lexically_normal();
  return temporary_path(d.has_filename() ? d : d.parent_path());
}

// Makes `dir` if it is new; refuses one that holds anything but a preparation's files. Under the lock,
// the temporary files of a preparation that did not finish are removed, and the folders beside `dir` of
// preparations whose process ended before swapping them in.
void take_folder(const fs::path& dir, bool locked) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir))
    fail<FileError>("--prepared: cannot make the folder '{}': {}", escaped(dir), ec ? ec.message() : "it is not a folder");
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (const char* kind = not_gpts(*it))
      fail<FileError>("--prepared: '{}' holds '{}'{}, which is not gpt's prepared data; give a new or empty folder, or "
                      "one gpt prepared",
                      escaped(dir), escaped(name), kind);
    std::error_code removing;  // its own: the loop's ends the loop
    if (locked && is_temporary_name(name)) fs::remove(it->path(), removing);
  }
  if (fs::exists(dir / kMetaFile) && !written_by_gpt(dir))
    fail<FileError>("--prepared: '{}' holds a {} that gpt did not write; give a new or empty folder, or one gpt prepared",
                    escaped(dir), kMetaFile);
  if (!locked) return;
  const fs::path mine = building_folder(dir);
  const std::string stem = mine.filename().string().substr(0, mine.filename().string().rfind('-') + 1);
  for (fs::directory_iterator it(mine.parent_path(), ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    std::error_code removing;  // its own: the loop's ends the loop
    if (name.starts_with(stem) && is_temporary_name(name) && it->is_directory(removing))
      fs::remove_all(it->path(), removing);
  }
}

// The two token files of a prepared folder, checked against meta.json and id by id in one pass, which
// also counts what meta.json claims of them (check_claims).
Prepared from_meta(const fs::path& dir, const Meta& m, std::string_view flag) {
  const auto start = std::chrono::steady_clock::now();
  Prepared p = m.counts;
  p.dir = dir;
  StreamCounts counts[2];
  counts[0].pairs.assign(256 * 256, 0);
  for (const bool train : {true, false}) {
    auto file = std::make_shared<const TokenFile>(dir / (train ? kTrainFile : kValidationFile), std::string(flag));
    if (file->width() != 1 || file->vocab() != 256)
      fail<FormatError>("{}: '{}' holds ids of {} bytes in a vocabulary of {}; gpt's prepared files hold bytes (1 byte, "
                        "256)",
                        flag, escaped(file->path()), file->width(), file->vocab());
    const Index ids = train ? m.train_ids : m.validation_ids;
    const std::uint32_t crc = train ? m.train_crc : m.validation_crc;
    if (file->size() != ids || file->ids_crc32() != crc)
      fail<FormatError>("{}: '{}' is not the file {} names ({} ids, CRC-32 {:08x}; it says {} ids, {:08x})", flag,
                        escaped(file->path()), kMetaFile, file->size(), file->ids_crc32(), ids, crc);
    StreamCounts& c = counts[train ? 0 : 1];
    file->verify(p.vocabulary.map(), [&c](std::span<const std::int32_t> piece) { c.add(piece); });
    (train ? p.train : p.validation) = std::move(file);
  }
  check_claims(p, counts[0], counts[1], flag);
  p.seconds = seconds_since(start);
  return p;
}

void sync_folder(const fs::path& dir, std::string_view flag) {
  const int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  const bool synced = fd >= 0 && ::fsync(fd) == 0;
  if (fd >= 0) ::close(fd);
  if (!synced) fail<IoError>("{}: syncing the folder '{}' failed: {}", flag, escaped(dir), std::strerror(errno));
}

// Streams the fortunes into token files and meta.json in a new folder beside `dir`, syncs them, and swaps
// that folder with `dir` in one rename: a reader of `dir` finds the earlier preparation or this one, whole.
// The earlier one is then removed; an error before the swap removes the new one and leaves `dir` as it was.
Prepared make(const fs::path& data, const std::vector<SourceFile>& files, const fs::path& dir, std::string_view flag) {
  const auto start = std::chrono::steady_clock::now();
  struct Building {
    fs::path dir;
    ~Building() {
      std::error_code ec;
      fs::remove_all(dir, ec);
    }
  } building{building_folder(dir)};
  std::error_code ec;
  fs::remove_all(building.dir, ec);  // left by an earlier process of this pid
  if (!fs::create_directory(building.dir, ec))
    fail<IoError>("{}: cannot make the folder '{}': {}", flag, escaped(building.dir), ec.message());
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
  TextSplitWriter out(building.dir / kTrainFile, building.dir / kValidationFile,
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
  p.source = source_key(data);
  p.fortunes = out.documents();
  p.empty = streams.empty;
  p.train_fortunes = s.documents[0];
  p.validation_fortunes = s.documents[1];
  p.vocabulary = ByteVocabulary::of_counts(s.byte_counts);
  p.train_pairs = s.train_pairs;
  write_meta(building.dir, files, reusable, p.source, p, TokenFile(building.dir / kTrainFile, std::string(flag)),
             TokenFile(building.dir / kValidationFile, std::string(flag)), flag);
  const FolderLock lock(building.dir, flag);  // a run waiting for `dir` waits on for this one once it is in place
  sync_folder(building.dir, flag);
  if (::renameat2(AT_FDCWD, building.dir.c_str(), AT_FDCWD, dir.c_str(), RENAME_EXCHANGE) != 0)
    fail<IoError>("{}: swapping the new preparation '{}' with '{}' failed: {}", flag, escaped(building.dir), escaped(dir),
                  std::strerror(errno));
  sync_folder(building.dir.parent_path(), flag);
  p.dir = dir;
  p.train = std::make_shared<const TokenFile>(dir / kTrainFile, std::string(flag));
  p.validation = std::make_shared<const TokenFile>(dir / kValidationFile, std::string(flag));
  p.made = true;
  p.seconds = seconds_since(start);
  return p;
}

// Why the preparation `m` describes is not that of `data` as it is now ("" if it is).
std::string stale(const Meta& m, const fs::path& data, const std::vector<SourceFile>& files) {
  if (m.source != source_key(data)) return fmt::format("it was prepared from '{}'", escaped(m.source));
  if (!m.reusable) return "its text's size could not tell the same text";
  if (m.files != describe_files(files))
    return "the data changed since: its files, their sizes or modification times are not those meta.json lists";
  return {};
}

}  // namespace

bool is_prepared_folder(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec) || !fs::is_regular_file(dir / kMetaFile, ec)) return false;
  // By names alone, not not_gpts(): given as --data a preparation is only read, never swapped or removed,
  // so its files may be links (to token files kept elsewhere).
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (const std::string name = it->path().filename().string(); !ours(name) && !is_temporary_name(name)) return false;
  return !ec;
}

fs::path default_prepared(const fs::path& data) {
  const std::string key = source_key(data);
  const std::string name = fs::path(key).filename().string();
  return fs::path("gpt_data") /
         fmt::format("{}-{:08x}", name.empty() ? "root" : name, Crc32().add(key.data(), key.size()).value());
}

Prepared prepare_data(const fs::path& data, const fs::path& prepared, std::string_view flag, bool may_write) {
  if (is_prepared_folder(data)) return from_meta(data, read_meta(data, flag), flag);
  const std::vector<SourceFile> files = list_source(data, flag);
  // A folder this process may not write (read-only), or a resume's recorded one: used as it is, or refused.
  std::error_code ec;
  if (!may_write || (fs::exists(prepared, ec) && ::access(prepared.c_str(), W_OK) != 0)) {
    std::string why = "it holds no preparation";
    if (is_prepared_folder(prepared)) {
      const Meta m = read_meta(prepared, flag);
      why = stale(m, data, files);
      if (why.empty()) return from_meta(prepared, m, flag);
    }
    fail<ValueError>("{}: '{}' is not prepared in '{}' ({}); {}", flag, escaped(data), escaped(prepared), why,
                     may_write ? "it cannot be prepared there, as this process may not write the folder"
                               : "a resume prepares only where it is told: give --prepared DIR to prepare it there");
  }
  take_folder(prepared, false);
  const FolderLock lock(prepared, "--prepared");
  take_folder(prepared, true);
  if (fs::exists(prepared / kMetaFile)) {
    try {
      const Meta m = read_meta(prepared, "--prepared");
      if (stale(m, data, files).empty()) return from_meta(prepared, m, flag);
    } catch (const FormatError&) {
      // Not this data's preparation after all (a file in it changed): prepared again below.
    }
  }
  return make(data, files, prepared, flag);
}

}  // namespace gpt
