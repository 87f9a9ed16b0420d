// A report file (JSON, JUnit) that is written whole or not at all, and never
// stale:
//   - Open() runs before the work the report describes: it checks the path
//     can be written (creating the temporary beside it, so a bad directory or
//     a read-only file system is found in a millisecond, not after a
//     two-minute campaign) and removes a previous report at the path, so an
//     interrupted or crashed run leaves no file rather than last run's
//     results reading as this run's.
//   - Commit() writes the contents to the temporary, flushes it to disk and
//     renames it over the path: readers see the old file, nothing, or the
//     whole new one.
//   - Destroyed without Commit (an error path), the temporary is removed.
// A path that exists and is not a regular file (/dev/stdout, a FIFO,
// /dev/full) is written in place instead -- a rename would replace the
// device -- with every write and the close checked.
#ifndef ATTNKIT_RUNTIME_REPORT_FILE_H_
#define ATTNKIT_RUNTIME_REPORT_FILE_H_

#include <string>
#include <string_view>

#include "runtime/status.h"

namespace attnkit {

class ReportFile {
 public:
  // `flag` names the option the path came from, for messages
  // ("--json=/x/y.json: cannot create ...").
  static StatusOr<ReportFile> Open(std::string path, std::string_view flag);

  ReportFile(ReportFile&& other) noexcept;
  ReportFile& operator=(ReportFile&& other) noexcept;
  ReportFile(const ReportFile&) = delete;
  ReportFile& operator=(const ReportFile&) = delete;
  ~ReportFile();

  // Writes `contents` and publishes the file; at most once.
  Status Commit(std::string_view contents);

  const std::string& path() const { return path_; }

 private:
  ReportFile() = default;
  void Discard();

  std::string path_, temp_, flag_;
  int fd_ = -1;
  bool in_place_ = false;  // not a regular file: written where it is
};

}  // namespace attnkit

#endif  // ATTNKIT_RUNTIME_REPORT_FILE_H_
