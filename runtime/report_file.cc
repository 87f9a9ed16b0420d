#include "runtime/report_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

namespace attnkit {
namespace {

Status Failed(const std::string& flag, const std::string& path,
              std::string_view what, int err) {
  return Status::InvalidArgument(flag + "=" + path + ": " + std::string(what) +
                                 ": " + std::strerror(err));
}

}  // namespace

StatusOr<ReportFile> ReportFile::Open(std::string path, std::string_view flag) {
  ReportFile f;
  f.path_ = std::move(path);
  f.flag_ = std::string(flag);
  if (f.path_.empty()) {
    return Status::InvalidArgument(f.flag_ + ": empty file name");
  }
  struct stat st;
  if (::stat(f.path_.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    if (S_ISDIR(st.st_mode)) {
      return Status::InvalidArgument(f.flag_ + "=" + f.path_ +
                                     ": is a directory");
    }
    f.in_place_ = true;
    f.fd_ = ::open(f.path_.c_str(), O_WRONLY | O_CLOEXEC);
    if (f.fd_ < 0) return Failed(f.flag_, f.path_, "cannot open", errno);
    return f;
  }
  f.temp_ = f.path_ + ".tmp." + std::to_string(::getpid());
  f.fd_ =
      ::open(f.temp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (f.fd_ < 0) {
    const int err = errno;
    f.temp_.clear();
    return Failed(f.flag_, f.path_, "cannot create a file beside it", err);
  }
  // No stale report: whatever this run ends like, the old one is not it.
  if (::unlink(f.path_.c_str()) != 0 && errno != ENOENT) {
    return Failed(f.flag_, f.path_, "cannot remove the previous report", errno);
  }
  return f;
}

ReportFile::ReportFile(ReportFile&& o) noexcept
    : path_(std::move(o.path_)),
      temp_(std::move(o.temp_)),
      flag_(std::move(o.flag_)),
      fd_(std::exchange(o.fd_, -1)),
      in_place_(o.in_place_) {
  o.temp_.clear();
}

ReportFile& ReportFile::operator=(ReportFile&& o) noexcept {
  if (this != &o) {
    Discard();
    path_ = std::move(o.path_);
    temp_ = std::move(o.temp_);
    flag_ = std::move(o.flag_);
    fd_ = std::exchange(o.fd_, -1);
    in_place_ = o.in_place_;
    o.temp_.clear();
  }
  return *this;
}

ReportFile::~ReportFile() { Discard(); }

void ReportFile::Discard() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!temp_.empty()) ::unlink(temp_.c_str());
  temp_.clear();
}

Status ReportFile::Commit(std::string_view contents) {
  if (fd_ < 0) {
    return Status::FailedPrecondition(flag_ + "=" + path_ +
                                      ": already written or not open");
  }
  size_t done = 0;
  while (done < contents.size()) {
    const ssize_t n =
        ::write(fd_, contents.data() + done, contents.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : ENOSPC;
      Discard();
      return Failed(flag_, path_, "cannot write", err);
    }
    done += static_cast<size_t>(n);
  }
  if (!in_place_ && ::fsync(fd_) != 0) {
    const int err = errno;
    Discard();
    return Failed(flag_, path_, "cannot flush", err);
  }
  const int fd = std::exchange(fd_, -1);
  if (::close(fd) != 0) {
    const int err = errno;
    Discard();
    return Failed(flag_, path_, "cannot close", err);
  }
  if (in_place_) return Status::Ok();
  if (::rename(temp_.c_str(), path_.c_str()) != 0) {
    const int err = errno;
    Discard();
    return Failed(flag_, path_, "cannot rename the finished file into place",
                  err);
  }
  temp_.clear();
  return Status::Ok();
}

}  // namespace attnkit
