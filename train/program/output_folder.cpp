#include "tapegrad/train/program/output_folder.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>
#include <sstream>

#include "tapegrad/core/descriptor.hpp"
#include "tapegrad/core/error.hpp"

namespace tapegrad {
namespace fs = std::filesystem;

namespace {

constexpr std::string_view kManifestHeader = "tapegrad-run 1";
constexpr std::size_t kMaxManifestBytes = std::size_t{1} << 20;

bool valid_name(std::string_view name) {
  if (name.empty() || name.size() > 4096) return false;
  for (char c : name)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-' || c == '/')) return false;
  // No empty, "." or ".." component: between slashes added at both ends, none is "//", "/./" or "/../" (a
  // leading or trailing '/' makes an empty one).
  const std::string slashed = fmt::format("/{}/", name);
  return slashed.find("//") == std::string::npos && slashed.find("/./") == std::string::npos &&
         slashed.find("/../") == std::string::npos;
}

bool valid_program(std::string_view program) {  // a name without folders
  return program.size() <= 200 && program.find('/') == std::string_view::npos && valid_name(program);
}

// fstatat's view of a name in a folder, not following a link: what is there, as messages name it
// (detail::kind_of: kRegular, kFolder, "a symbolic link", ...), or "" when nothing is. The two kinds compared
// are kind_of's own words, so its wording has one home.
const std::string_view kRegular = detail::kind_of(S_IFREG), kFolder = detail::kind_of(S_IFDIR);

std::string_view kind_at(int folder, const char* name) {
  struct stat st {};
  return ::fstatat(folder, name, &st, AT_SYMLINK_NOFOLLOW) == 0 ? detail::kind_of(st.st_mode) : "";
}

// The folder `name` in the open folder `at` (AT_FDCWD: the working folder), made first when `create`,
// opened without following a link; not open when it is missing and not to be made. A symbolic link or
// anything else that is not a folder is a FileError naming `shown`: a link, planted in a shared folder or
// given as the run's folder, could be moved to lead the run's writes and removals elsewhere.
detail::Descriptor open_folder(int at, const std::string& name, bool create, const fs::path& shown,
                               std::string_view op) {
  if (create && ::mkdirat(at, name.c_str(), 0777) != 0 && errno != EEXIST)  // less the umask, as write_file's
    fail<FileError>("{}: cannot create the folder '{}': {}", op, escaped(shown), std::strerror(errno));
  const std::string_view kind = kind_at(at, name.c_str());
  if (kind.empty() && !create) return {};
  if (!kind.empty() && kind != kFolder)
    fail<FileError>(
        "{}: '{}' is {}, not a folder of the run; nothing is written or removed through it (a link can be moved "
        "to another folder while the run writes)",
        op, escaped(shown), kind);
  detail::Descriptor folder(::openat(at, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!folder.open())  // replaced by a link since the look: the same refusal
    fail<FileError>("{}: cannot open the folder '{}' without following a link: {}", op, escaped(shown),
                    std::strerror(errno));
  return folder;
}

// The folder that holds a run's file, open, the file's own name in it, and what is there.
struct Place {
  detail::Descriptor folder;  // not open: a folder on the way is missing (and was not to be made)
  std::string name;
  std::string_view kind;  // kind_at's: "" when nothing is there (or the folder is missing)
};

// Walks `relative` (a checked name) from the descriptor `top` one folder at a time, never through a
// link: a folder on the way that is a symbolic link, or not a folder, is a FileError naming it (a link
// planted in a shared folder would otherwise lead a removal or a write outside it). Missing folders are
// made when `create`, else the place comes back not open.
Place place_of(int top, std::string_view relative, bool create, const fs::path& folder, std::string_view flag) {
  Place place;
  place.folder = open_folder(top, ".", false, folder, flag);  // the place's own descriptor of it
  std::size_t start = 0;
  for (std::size_t slash; (slash = relative.find('/', start)) != std::string_view::npos; start = slash + 1) {
    const std::string part(relative.substr(start, slash - start));
    const fs::path shown = folder / fs::path(std::string(relative.substr(0, slash)));
    place.folder = open_folder(place.folder.get(), part, create, shown, flag);
    if (!place.folder.open()) return place;
  }
  place.name = std::string(relative.substr(start));
  place.kind = kind_at(place.folder.get(), place.name.c_str());
  return place;
}

// Removes the place's file if it is a regular file (anything else there is left alone); false, with errno
// set, if the system refused.
bool remove_regular_at(const Place& place) {
  return place.kind != kRegular || ::unlinkat(place.folder.get(), place.name.c_str(), 0) == 0 || errno == ENOENT;
}

// Removes write_file's temporary files (".<name>.tmp-<pid>") from the open folder `folder`, regular files
// only, never following a link.
void remove_stale_temporaries_at(int folder) {
  detail::Descriptor listing(::fcntl(folder, F_DUPFD_CLOEXEC, 0));  // `folder` stays open
  DIR* d = listing.open() ? ::fdopendir(listing.get()) : nullptr;
  if (!d) return;
  listing.release();  // closedir closes it
  std::vector<std::string> stale;
  while (const dirent* e = ::readdir(d))
    if (is_temporary_name(e->d_name) && kind_at(folder, e->d_name) == kRegular) stale.emplace_back(e->d_name);
  ::closedir(d);
  for (const auto& name : stale) ::unlinkat(folder, name.c_str(), 0);
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
    fail<FileError>(
        "{}: the run manifest '{}' is damaged (line {}: {}); it lists the files of the run in that folder: "
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
}  // namespace

FolderLock::FolderLock(const std::filesystem::path& folder, std::string_view op) {
  // "run/" would name the folder a link "run" points to: the folder's own name, without the slash.
  std::string own = folder.native();
  while (own.size() > 1 && own.back() == '/') own.pop_back();
  const fs::path parent = fs::path(own).parent_path();  // made as any path is: its own links are the user's
  std::error_code ec;
  if (!parent.empty()) fs::create_directories(parent, ec);
  if (ec) fail<FileError>("{}: cannot create the folder '{}': {}", op, escaped(parent), ec.message());
  // Opened once, not through a link; every later name of the run is resolved from this descriptor.
  detail::Descriptor folder_fd = open_folder(AT_FDCWD, own, true, folder, op);
  // The lock file is the folder's own, never a link (which would have us truncate its target) nor a file
  // with another name elsewhere (a hard link): O_NOFOLLOW, then a regular file with one link, before a
  // byte of it is changed. O_NONBLOCK: a pipe planted there does not hang the open.
  const fs::path lock = folder / ".tapegrad.lock";
  detail::Descriptor lock_fd(
      ::openat(folder_fd.get(), ".tapegrad.lock", O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644));
  struct stat st {};
  if (!lock_fd.open() || ::fstat(lock_fd.get(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_nlink != 1) {
    const int saved = errno;
    const std::string_view what = kind_at(folder_fd.get(), ".tapegrad.lock");
    if (!what.empty() && what != kRegular)  // a link, a pipe, a device, a folder
      fail<FileError>(
          "{}: the lock file '{}' is {}, not a regular file; the folder is not used (remove it by hand if "
          "you made it)",
          op, escaped(lock), what);
    if (S_ISREG(st.st_mode))
      fail<FileError>(
          "{}: the lock file '{}' is not a regular file of its own (it is a hard link to another name); "
          "the folder is not used",
          op, escaped(lock));
    fail<FileError>("{}: cannot write in the folder '{}': {}", op, escaped(folder), std::strerror(saved));
  }
  if (::flock(lock_fd.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK)
      fail<FileError>("{}: cannot lock the folder '{}': {}", op, escaped(folder), std::strerror(errno));
    // The pid the other run wrote, if that is what the file holds (it is anyone's to edit): 10 digits at most.
    std::string pid(11, '\0');
    pid.resize(static_cast<std::size_t>(std::max<ssize_t>(0, ::pread(lock_fd.get(), pid.data(), pid.size(), 0))));
    if (pid.empty() || pid.size() > 10 || pid.find_first_not_of("0123456789") != std::string::npos) pid = "unknown";
    fail<BusyError>("{}: another run (pid {}) is using the folder '{}'; wait for it to finish or choose another", op,
                    pid, escaped(folder));
  }
  const std::string pid = fmt::format("{}", ::getpid());
  if (::ftruncate(lock_fd.get(), 0) != 0 ||
      ::pwrite(lock_fd.get(), pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size()))
    fail<FileError>("{}: cannot write in the folder '{}': {}", op, escaped(folder), std::strerror(errno));
  folder_fd_ = folder_fd.release();
  lock_fd_ = lock_fd.release();
}

FolderLock::~FolderLock() {
  ::close(lock_fd_);  // drops the lock; the file stays, harmless
  ::close(folder_fd_);
}

OutputFolder::OutputFolder(fs::path folder, OutputFolderOptions options)
    : folder_(std::move(folder)), options_(std::move(options)) {
  if (!valid_program(options_.program))
    fail<UsageError>("OutputFolder: '{}' is not a program name (letters, digits, '.', '_', '-')",
                     escaped(options_.program));
  lock_ = std::make_unique<FolderLock>(folder_, options_.flag);
  const int top = lock_->folder_fd();
  const fs::path manifest_path = folder_ / kManifestName;
  const std::string_view manifest_kind = kind_at(top, std::string(kManifestName).c_str());
  if (!manifest_kind.empty() && manifest_kind != kRegular)
    fail<FileError>("{}: '{}' is {}, not a run manifest", options_.flag, escaped(manifest_path), manifest_kind);
  Manifest manifest;
  if (!manifest_kind.empty())
    manifest = parse_manifest(read_file(manifest_path, kMaxManifestBytes, options_.flag), manifest_path, options_.flag);
  // Each listed file's place, found without following a link (a listed path through a link is refused
  // here, before anything is removed); the ones still there are the earlier run's.
  std::vector<Place> places;
  for (const auto& f : manifest.files) {
    Place place = place_of(top, f, false, folder_, options_.flag);
    if (!place.kind.empty()) {
      files_.push_back(f);
      places.push_back(std::move(place));
    }
  }
  if (manifest.program != options_.program && !files_.empty())
    fail<FileError>("{}: '{}' holds the files of a {} run ({}); choose another folder for this {} run", options_.flag,
                    escaped(folder_), manifest.program, quoted_list(files_, 3), options_.program);
  for (const auto& place : places) remove_stale_temporaries_at(place.folder.get());
  remove_stale_temporaries_at(top);
  if (files_.empty() || options_.resume) return;
  if (!options_.overwrite)
    fail<FileError>(
        "{}: '{}' holds the files of an earlier {} run ({}); choose a new folder, or --overwrite to replace them",
        options_.flag, escaped(folder_), options_.program, quoted_list(files_, 3));
  // --overwrite: exactly the listed files go, after checking that none is an input of this run.
  for (const auto& f : files_) check_replaceable(f);
  for (std::size_t i = 0; i < files_.size(); ++i)
    if (!remove_regular_at(places[i]))
      fail<FileError>("{}: cannot remove the earlier run's '{}': {}", options_.flag, escaped(folder_ / files_[i]),
                      std::strerror(errno));
  files_.clear();
  save_manifest();
}

fs::path OutputFolder::path(std::string_view relative) const {
  if (!valid_name(relative) || relative == kManifestName)
    fail<UsageError>(
        "OutputFolder: '{}' is not a name a run can write (letters, digits, '.', '_', '-', '/' between folders)",
        escaped(relative));
  return folder_ / fs::path(std::string(relative));
}

bool OutputFolder::listed(std::string_view relative) const {
  return std::find(files_.begin(), files_.end(), relative) != files_.end();
}

void OutputFolder::check_replaceable(std::string_view relative) const {
  const fs::path full = path(relative);
  const Place place = place_of(lock_->folder_fd(), relative, false, folder_, options_.flag);
  if (place.kind.empty()) return;
  if (place.kind != kRegular)
    fail<FileError>("{}: '{}' is {}, not a regular file; the run does not replace it", options_.flag, escaped(full),
                    place.kind);
  for (const auto& input : options_.inputs) {
    std::error_code ec;
    if (fs::equivalent(full, input, ec))
      fail<FileError>("{}: '{}' is an input of this run; it would be replaced by the run's '{}': choose another folder",
                      options_.flag, escaped(input), escaped(relative));
  }
  if (!listed(relative))
    fail<FileError>(
        "{}: '{}' is there and no earlier {} run in this folder wrote it; it is not replaced (move it away or "
        "choose another folder)",
        options_.flag, escaped(full), options_.program);
}

void OutputFolder::plan(const std::vector<std::string>& relative) const {
  for (const auto& name : relative) {
    check_replaceable(name);
    place_of(lock_->folder_fd(), name, true, folder_, options_.flag);  // its folders made, none a link
    check_writable(path(name), options_.flag);
  }
  check_writable(folder_ / kManifestName, options_.flag);
}

void OutputFolder::save_manifest() const {
  std::string text = fmt::format("{}\nprogram {}\n", kManifestHeader, options_.program);
  for (const auto& f : files_) text += fmt::format("file {}\n", f);
  write_file_at(lock_->folder_fd(), kManifestName, text, Durability::durable, options_.flag, folder_ / kManifestName);
}

fs::path OutputFolder::claim(std::string_view relative) {
  check_replaceable(relative);
  if (!listed(relative)) {
    files_.emplace_back(relative);
    save_manifest();
  }
  place_of(lock_->folder_fd(), relative, true, folder_, options_.flag);  // its folders made, none a link
  return path(relative);
}

void OutputFolder::write(std::string_view relative, std::string_view content, Durability durability) {
  const fs::path full = claim(relative);
  const Place place = place_of(lock_->folder_fd(), relative, true, folder_, options_.flag);
  write_file_at(place.folder.get(), place.name, content, durability, "write", full);
}

void OutputFolder::remove(std::string_view relative) {
  const fs::path full = path(relative);
  if (!listed(relative))
    fail<UsageError>("OutputFolder: '{}' is not a file of this run; it is not removed", escaped(full));
  if (!remove_regular_at(place_of(lock_->folder_fd(), relative, false, folder_, options_.flag)))
    fail<IoError>("{}: removing '{}' failed: {}", options_.flag, escaped(full), std::strerror(errno));
  std::erase(files_, std::string(relative));
  save_manifest();
}

void OutputFolder::rename(std::string_view from, std::string_view to) {
  if (!listed(from)) fail<UsageError>("OutputFolder: '{}' is not a file of this run", escaped(path(from)));
  claim(to);
  const Place source = place_of(lock_->folder_fd(), from, false, folder_, options_.flag);
  const Place target = place_of(lock_->folder_fd(), to, true, folder_, options_.flag);
  if (source.kind != kRegular ||
      ::renameat(source.folder.get(), source.name.c_str(), target.folder.get(), target.name.c_str()) != 0)
    fail<IoError>("{}: renaming '{}' failed: {}", options_.flag, escaped(path(from)),
                  source.kind == kRegular ? std::strerror(errno) : "no regular file has that name");
  std::erase(files_, std::string(from));
  save_manifest();
}

}  // namespace tapegrad
