#include "tapegrad/program/output_folder.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>
#include <sstream>

#include "tapegrad/core/error.hpp"

namespace tapegrad {
namespace fs = std::filesystem;

namespace {

constexpr std::string_view kManifestHeader = "tapegrad-run 1";
constexpr std::size_t kMaxManifestBytes = std::size_t{1} << 20;

bool valid_name(std::string_view name) {
  if (name.empty() || name.size() > 4096 || name.front() == '/' || name.back() == '/') return false;
  for (char c : name)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-' || c == '/')) return false;
  std::size_t start = 0;
  while (start <= name.size()) {  // no empty, "." or ".." component
    const std::size_t end = std::min(name.find('/', start), name.size());
    const std::string_view part = name.substr(start, end - start);
    if (part.empty() || part == "." || part == "..") return false;
    start = end + 1;
  }
  return true;
}

bool valid_program(std::string_view program) {
  return !program.empty() && program.size() <= 200 && program.find_first_of(" \t\r\n/") == std::string_view::npos &&
         valid_name(program);
}

// lstat's view of a path: missing, a regular file, or something else (named for messages).
struct PathKind {
  bool exists = false;
  bool regular = false;
  const char* what = "";
};

PathKind kind_of(const fs::path& p) {
  struct stat st {};
  if (::lstat(p.c_str(), &st) != 0) return {};
  return {true, S_ISREG(st.st_mode) != 0,
          S_ISDIR(st.st_mode)    ? "a folder"
          : S_ISCHR(st.st_mode)  ? "a character device"
          : S_ISBLK(st.st_mode)  ? "a block device"
          : S_ISFIFO(st.st_mode) ? "a pipe"
          : S_ISLNK(st.st_mode)  ? "a symbolic link"
          : S_ISSOCK(st.st_mode) ? "a socket"
                                 : "a regular file"};
}

struct Manifest {
  std::string program;
  std::vector<std::string> files;
};

Manifest parse_manifest(const std::string& text, const fs::path& where, std::string_view flag) {
  Manifest m;
  std::istringstream in(text);
  std::string line;
  int number = 0;
  std::set<std::string> seen;
  auto damaged = [&](std::string_view why) {
    fail<FileError>("{}: the run manifest '{}' is damaged (line {}: {}); it lists the files of the run in that folder: "
                    "remove it by hand only if the folder holds nothing you want kept",
                    flag, escaped(where), number, why);
  };
  while (std::getline(in, line)) {
    ++number;
    if (number == 1) {
      if (line != kManifestHeader) damaged("not a tapegrad run manifest");
    } else if (number == 2) {
      if (!line.starts_with("program ") || !valid_program(std::string_view(line).substr(8))) damaged("no program name");
      m.program = line.substr(8);
    } else {
      if (!line.starts_with("file ") || !valid_name(std::string_view(line).substr(5))) damaged("not a file of the run");
      if (seen.insert(line.substr(5)).second) m.files.push_back(line.substr(5));
    }
  }
  if (number < 2) damaged("too short");
  return m;
}

// The pid another run wrote into the lock file, if that is what it holds (the file is anyone's to edit).
std::string owner_pid(const char* text, ssize_t n) {
  const std::string s(text, n > 0 ? static_cast<std::size_t>(n) : 0);
  if (s.empty() || s.size() > 10 || s.find_first_not_of("0123456789") != std::string::npos) return "unknown";
  return s;
}
}  // namespace

FolderLock::FolderLock(std::filesystem::path folder, std::string_view op) : folder_(std::move(folder)) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::exists(folder_, ec) && !fs::is_directory(folder_, ec))
    fail<FileError>("{}: '{}' is not a folder; give a folder for the run's files", op, escaped(folder_));
  fs::create_directories(folder_, ec);
  if (ec) fail<FileError>("{}: cannot create the folder '{}': {}", op, escaped(folder_), ec.message());
  const fs::path lock = folder_ / ".tapegrad.lock";
  fd_ = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) fail<FileError>("{}: cannot write in the folder '{}': {}", op, escaped(folder_), std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int saved = errno;
    char pid[32] = {};
    const ssize_t n = ::pread(fd_, pid, sizeof pid - 1, 0);
    ::close(fd_);
    fd_ = -1;
    if (saved == EWOULDBLOCK)
      fail<BusyError>("{}: another run (pid {}) is using the folder '{}'; wait for it to finish or choose another", op,
                      owner_pid(pid, n), escaped(folder_));
    fail<FileError>("{}: cannot lock the folder '{}': {}", op, escaped(folder_), std::strerror(saved));
  }
  const std::string pid = fmt::format("{}", ::getpid());
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size())) {
    const int saved = errno;
    ::close(fd_);
    fd_ = -1;
    fail<FileError>("{}: cannot write in the folder '{}': {}", op, escaped(folder_), std::strerror(saved));
  }
}

FolderLock::~FolderLock() {
  if (fd_ >= 0) ::close(fd_);  // closing drops the lock; the file stays, harmless
}

int remove_stale_temporaries(const std::filesystem::path& folder) {
  std::error_code ec;
  int removed = 0;
  for (const auto& entry : std::filesystem::directory_iterator(folder, ec)) {
    // Exactly write_file's temporary files: a user's own dot-file is never touched.
    if (is_temporary_name(entry.path().filename().native()) && entry.is_regular_file(ec))
      removed += std::filesystem::remove(entry.path(), ec) ? 1 : 0;
  }
  return removed;
}

OutputFolder::OutputFolder(fs::path folder, OutputFolderOptions options) : folder_(std::move(folder)), options_(std::move(options)) {
  if (!valid_program(options_.program))
    fail<UsageError>("OutputFolder: '{}' is not a program name (letters, digits, '.', '_', '-')", escaped(options_.program));
  lock_ = std::make_unique<FolderLock>(folder_, options_.flag);
  const fs::path manifest_path = folder_ / kManifestName;
  const PathKind manifest_kind = kind_of(manifest_path);
  if (manifest_kind.exists && !manifest_kind.regular)
    fail<FileError>("{}: '{}' is {}, not a run manifest", options_.flag, escaped(manifest_path), manifest_kind.what);
  Manifest manifest;
  if (manifest_kind.exists) manifest = parse_manifest(read_file(manifest_path, kMaxManifestBytes, options_.flag), manifest_path, options_.flag);
  std::vector<std::string> present;  // listed files still in the folder
  for (const auto& f : manifest.files)
    if (kind_of(folder_ / f).exists) present.push_back(f);
  if (manifest_kind.exists && manifest.program != options_.program && !present.empty())
    fail<FileError>("{}: '{}' holds the files of a {} run ({}); choose another folder for this {} run", options_.flag,
                    escaped(folder_), manifest.program, quoted_list(present, 3), options_.program);
  for (const auto& f : present) remove_stale_temporaries((folder_ / f).parent_path());
  remove_stale_temporaries(folder_);
  if (present.empty() || options_.resume) {
    files_ = present;
    return;
  }
  if (!options_.overwrite)
    fail<FileError>("{}: '{}' holds the files of an earlier {} run ({}); choose a new folder, or --overwrite to replace them",
                    options_.flag, escaped(folder_), options_.program, quoted_list(present, 3));
  // --overwrite: exactly the listed files go, after checking that none is an input of this run.
  files_ = present;
  for (const auto& f : present) check_replaceable(f);
  files_.clear();
  for (const auto& f : present) {
    std::error_code ec;
    if (kind_of(folder_ / f).regular && !fs::remove(folder_ / f, ec) && ec)
      fail<FileError>("{}: cannot remove the earlier run's '{}': {}", options_.flag, escaped(folder_ / f), ec.message());
  }
  save_manifest();
}

OutputFolder::~OutputFolder() = default;

void OutputFolder::check_name(std::string_view relative) const {
  if (!valid_name(relative) || relative == kManifestName)
    fail<UsageError>("OutputFolder: '{}' is not a name a run can write (letters, digits, '.', '_', '-', '/' between folders)",
                     escaped(relative));
}

fs::path OutputFolder::path(std::string_view relative) const {
  check_name(relative);
  return folder_ / fs::path(std::string(relative));
}

bool OutputFolder::listed(std::string_view relative) const {
  return std::find(files_.begin(), files_.end(), relative) != files_.end();
}

void OutputFolder::check_replaceable(std::string_view relative) const {
  const fs::path full = path(relative);
  const PathKind kind = kind_of(full);
  if (!kind.exists) return;
  if (!kind.regular)
    fail<FileError>("{}: '{}' is {}, not a regular file; the run does not replace it", options_.flag, escaped(full), kind.what);
  for (const auto& input : options_.inputs) {
    std::error_code ec;
    if (fs::equivalent(full, input, ec))
      fail<FileError>("{}: '{}' is an input of this run; it would be replaced by the run's '{}': choose another folder",
                      options_.flag, escaped(input), escaped(relative));
  }
  if (!listed(relative))
    fail<FileError>("{}: '{}' is there and no earlier {} run in this folder wrote it; it is not replaced (move it away or "
                    "choose another folder)",
                    options_.flag, escaped(full), options_.program);
}

void OutputFolder::plan(const std::vector<std::string>& relative) const {
  std::vector<std::string> all = relative;
  all.emplace_back(kManifestName);
  for (const auto& name : all) {
    const fs::path full = name == kManifestName ? folder_ / kManifestName : path(name);
    if (name != kManifestName) check_replaceable(name);
    check_writable(full, options_.flag);
  }
}

void OutputFolder::save_manifest() const {
  std::string text = fmt::format("{}\nprogram {}\n", kManifestHeader, options_.program);
  for (const auto& f : files_) text += fmt::format("file {}\n", f);
  write_file(folder_ / kManifestName, text, Durability::durable, options_.flag);
}

fs::path OutputFolder::claim(std::string_view relative) {
  check_replaceable(relative);
  if (!listed(relative)) {
    files_.emplace_back(relative);
    save_manifest();
  }
  const fs::path full = path(relative);
  std::error_code ec;
  fs::create_directories(full.parent_path(), ec);
  if (ec) fail<FileError>("{}: cannot create the folder '{}': {}", options_.flag, escaped(full.parent_path()), ec.message());
  return full;
}

void OutputFolder::write(std::string_view relative, std::string_view content, Durability durability) {
  write_file(claim(relative), content, durability, "write");
}

void OutputFolder::remove(std::string_view relative) {
  const fs::path full = path(relative);
  if (!listed(relative))
    fail<UsageError>("OutputFolder: '{}' is not a file of this run; it is not removed", escaped(full));
  std::error_code ec;
  if (kind_of(full).regular && !fs::remove(full, ec) && ec)
    fail<IoError>("{}: removing '{}' failed: {}", options_.flag, escaped(full), ec.message());
  std::erase(files_, std::string(relative));
  save_manifest();
}

void OutputFolder::rename(std::string_view from, std::string_view to) {
  if (!listed(from)) fail<UsageError>("OutputFolder: '{}' is not a file of this run", escaped(path(from)));
  const fs::path target = claim(to);
  if (::rename(path(from).c_str(), target.c_str()) != 0)
    fail<IoError>("{}: renaming '{}' failed: {}", options_.flag, escaped(path(from)), std::strerror(errno));
  std::erase(files_, std::string(from));
  save_manifest();
}

}  // namespace tapegrad
