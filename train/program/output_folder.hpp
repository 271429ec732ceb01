#pragma once
// A run's output folder: the files a program writes there belong to the run, and nothing else in the
// folder is touched. One facility for every program (the examples' and a user's), so that none of them
// can replace another program's model, delete a user's file or its own input, or find out after an
// hour of training that it cannot write its results.
//
//   OutputFolder out(dir, {.program = "char_lm", .overwrite = o.overwrite, .inputs = {o.data}});
//   out.plan({"report.md", "samples_bigram.txt", "checkpoints/checkpoint-00002000.tgck"});  // before training
//   out.write("report.md", text);                          // atomic, and listed as this run's
//   CsvLog log(out.claim("curve.csv"));                    // a file the caller writes itself
//
// - The folder is made if missing and locked for the run (FolderLock): a second run on it is a BusyError.
//   Once it is locked, and not another program's, the temporary files a killed writer left
//   (".<name>.tmp-<pid>") are removed from it and from the folder of each listed file still there: no other
//   writer can be using them.
// - Its manifest, `.tapegrad-run`, names the program and lists every file a run of it wrote there (listed
//   before the file is written, so a run killed mid-write leaves nothing unlisted). The manifest is the
//   whole of what a later run may replace or remove.
// - A folder whose manifest names another program is refused (FileError): one folder, one program's run.
// - A folder with an earlier run of this program is refused unless `overwrite` (then exactly the files its
//   manifest lists are removed, and none of them may be an input of this run) or `resume` (the run goes on:
//   it may replace its own files).
// - A file the run writes must be missing or listed: a user's file, or one a program wrote before
//   manifests existed, at that path is refused, never replaced; a path that is not a regular file (a
//   device, a pipe, a folder, a symbolic link) is refused by write_file too.
// - plan() proves, before the run starts, that every file it names can be written: a regular file or
//   missing, its name and its temporary file's within the file system's limits, its folder creatable and
//   writable (a probe file is made there and removed).
// Relative names are the program's own: letters, digits, '.', '_', '-' and '/' between folders.

#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tapegrad/core/file_io.hpp"

namespace tapegrad {

// A folder this process owns while the lock lives: made (with its parents) if missing, and locked with
// flock() on <folder>/.tapegrad.lock, which holds the owner's pid. The system drops the lock when the
// process ends, however it ends, so a killed run never leaves the folder locked. Throws FileError when the
// folder cannot be made or written (a file in its place, a read-only mount, no permission) and BusyError
// naming the other process when one holds it.
class FolderLock {
 public:
  FolderLock(const std::filesystem::path& folder, std::string_view op);
  ~FolderLock();
  FolderLock(const FolderLock&) = delete;
  FolderLock& operator=(const FolderLock&) = delete;
  // The folder, open: names of the run resolve from it (openat), so a link planted or swapped in the
  // folder's place after it was opened leads nowhere else.
  int folder_fd() const { return folder_fd_; }

 private:
  int folder_fd_ = -1;
  int lock_fd_ = -1;  // flock()ed while open
};

struct OutputFolderOptions {
  std::string program;                             // the manifest's owner: "train", "char_lm", a user's program
  bool overwrite = false;                          // replace (remove first) an earlier run's files
  bool resume = false;                             // a run that goes on: its own listed files may be replaced
  std::vector<std::filesystem::path> inputs = {};  // files this run reads: never removed
  std::string flag = "--out";                      // how messages name the folder's option
};

class OutputFolder {
 public:
  static constexpr std::string_view kManifestName = ".tapegrad-run";

  OutputFolder(std::filesystem::path folder, OutputFolderOptions options);
  OutputFolder(const OutputFolder&) = delete;
  OutputFolder& operator=(const OutputFolder&) = delete;

  const std::filesystem::path& folder() const { return folder_; }
  std::filesystem::path path(std::string_view relative) const;  // folder / relative (checked name)

  // Proves, before anything is written, that each of these files can be (see above). FileError naming
  // the first that cannot, and why.
  void plan(const std::vector<std::string>& relative) const;
  // Lists `relative` as this run's (the manifest is rewritten first) and returns its full path, for a
  // caller that writes the file itself. FileError if a file the run may not replace is there.
  std::filesystem::path claim(std::string_view relative);
  // claim(), then write_file() (atomic).
  void write(std::string_view relative, std::string_view content, Durability durability = Durability::replace);
  // Removes a file of this run and drops it from the manifest (missing already is fine).
  void remove(std::string_view relative);
  // Renames a file of this run over another of its names (atomic within the folder).
  void rename(std::string_view from, std::string_view to);
  const std::vector<std::string>& files() const { return files_; }  // listed, in the order first written

 private:
  void check_replaceable(std::string_view relative) const;
  void save_manifest() const;
  bool listed(std::string_view relative) const;

  std::filesystem::path folder_;
  OutputFolderOptions options_;
  std::unique_ptr<FolderLock> lock_;
  std::vector<std::string> files_;  // this program's files in the folder, by the manifest
};

}  // namespace tapegrad
