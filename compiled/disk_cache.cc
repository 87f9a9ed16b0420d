#include "compiled/disk_cache.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/SHA256.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <utility>
#include <vector>

namespace attnkit::compiled {

namespace {

/// The first line of every entry; the number changes with the format.
constexpr std::string_view kMagic = "attnkit-kernel-cache 1\n";

std::string errnoText() { return std::strerror(errno); }

/// `dir` and its parents, mode 0700 (object code others could replace
/// would run in our process).
bool makeDirs(const std::string &dir, std::string *why) {
  std::string path;
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = dir.find('/', pos + 1);
    path = dir.substr(0, pos);
    if (path.empty())
      continue;
    if (::mkdir(path.c_str(), 0700) != 0 && errno != EEXIST) {
      *why = "cannot create " + path + ": " + errnoText();
      return false;
    }
  }
  return true;
}

bool readFile(const std::string &path, std::string &out) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return false;
  out.clear();
  char buf[1 << 16];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof(buf))) > 0)
    out.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return n == 0;
}

/// The decimal number at the front of `s` (consumed), then `end`.
std::optional<size_t> takeNumber(std::string_view &s, char end) {
  size_t i = 0, v = 0;
  while (i < s.size() && i < 19 && s[i] >= '0' && s[i] <= '9')
    v = v * 10 + static_cast<size_t>(s[i++] - '0');
  if (i == 0 || i >= s.size() || s[i] != end)
    return std::nullopt;
  s.remove_prefix(i + 1);
  return v;
}

bool takePrefix(std::string_view &s, std::string_view p) {
  if (!s.starts_with(p))
    return false;
  s.remove_prefix(p.size());
  return true;
}

} // namespace

std::string DiskCache::defaultDir() {
  if (const char *e = std::getenv("ATTNKIT_KERNEL_CACHE")) {
    const std::string v = e;
    return v == "off" ? std::string() : v;
  }
  if (const char *x = std::getenv("XDG_CACHE_HOME"); x && x[0] == '/')
    return std::string(x) + "/attnkit/kernels";
  if (const char *h = std::getenv("HOME"); h && h[0] == '/')
    return std::string(h) + "/.cache/attnkit/kernels";
  return std::string();
}

std::string DiskCache::sha256Hex(std::string_view bytes) {
  return llvm::toHex(
      llvm::SHA256::hash(llvm::ArrayRef<uint8_t>(
          reinterpret_cast<const uint8_t *>(bytes.data()), bytes.size())),
      /*LowerCase=*/true);
}

std::string DiskCache::pathOf(std::string_view key) const {
  return dir_ + "/" + sha256Hex(key).substr(0, 32) + ".kernel";
}

std::optional<std::string> DiskCache::load(std::string_view key,
                                           std::string *why) const {
  const std::string path = pathOf(key);
  std::string file;
  if (!readFile(path, file))
    return std::nullopt; // no entry (or unreadable: compiled and rewritten)
  std::string_view s = file;
  auto bad = [&](const std::string &what) -> std::optional<std::string> {
    *why = path + ": " + what + "; removed, the kernel is rebuilt";
    ::unlink(path.c_str());
    return std::nullopt;
  };
  if (!takePrefix(s, kMagic))
    return bad("not a kernel cache entry of this version");
  if (!takePrefix(s, "key "))
    return bad("no key line");
  const auto keyLen = takeNumber(s, '\n');
  if (!keyLen || *keyLen > s.size())
    return bad("truncated key");
  if (s.substr(0, *keyLen) != key)
    return bad("the entry of another key (a hash collision or a foreign "
               "file)");
  s.remove_prefix(*keyLen);
  if (!takePrefix(s, "\nobject "))
    return bad("no object line");
  const auto size = takeNumber(s, ' ');
  if (!size || s.size() < 65 || s[64] != '\n')
    return bad("truncated object line");
  const std::string_view sum = s.substr(0, 64);
  s.remove_prefix(65);
  if (s.size() != *size)
    return bad("object of " + std::to_string(s.size()) + " bytes, " +
               std::to_string(*size) + " expected (truncated)");
  if (sha256Hex(s) != sum)
    return bad("object bytes do not match their SHA-256 (corrupt)");
  ::utimensat(AT_FDCWD, path.c_str(), nullptr, 0); // recently used
  return std::string(s);
}

bool DiskCache::store(std::string_view key, std::string_view object,
                      std::string *why) const {
  if (!makeDirs(dir_, why))
    return false;
  std::string text(kMagic);
  text += "key " + std::to_string(key.size()) + "\n";
  text += key;
  text += "\nobject " + std::to_string(object.size()) + " " +
          sha256Hex(object) + "\n";
  text += object;
  const std::string path = pathOf(key);
  std::string tmp = path + ".XXXXXX";
  const int fd = ::mkstemp(tmp.data());
  if (fd < 0) {
    *why = "cannot create a temporary beside " + path + ": " + errnoText();
    return false;
  }
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n <= 0) {
      if (n < 0 && errno == EINTR)
        continue;
      *why = "cannot write " + tmp + ": " + errnoText();
      ::close(fd);
      ::unlink(tmp.c_str());
      return false;
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    *why = "cannot write " + tmp + ": " + errnoText();
    ::unlink(tmp.c_str());
    return false;
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    *why = "cannot rename " + tmp + " to " + path + ": " + errnoText();
    ::unlink(tmp.c_str());
    return false;
  }
  prune();
  return true;
}

void DiskCache::prune() const {
  DIR *d = ::opendir(dir_.c_str());
  if (d == nullptr)
    return;
  std::vector<std::pair<timespec, std::string>> entries;
  const time_t now = ::time(nullptr);
  while (const dirent *e = ::readdir(d)) {
    const std::string_view name = e->d_name;
    const std::string path = dir_ + "/" + std::string(name);
    struct stat st;
    if (name.starts_with(".") || ::stat(path.c_str(), &st) != 0)
      continue;
    if (name.ends_with(".kernel")) {
      entries.emplace_back(st.st_mtim, path);
    } else if (name.find(".kernel.") != std::string_view::npos ||
               name.starts_with("capture.")) {
      if (now - st.st_mtime > 3600) // a crashed writer's temporary
        ::unlink(path.c_str());
    }
  }
  ::closedir(d);
  if (entries.size() <= maxEntries_)
    return;
  std::sort(entries.begin(), entries.end(), [](const auto &a, const auto &b) {
    return std::pair(a.first.tv_sec, a.first.tv_nsec) <
           std::pair(b.first.tv_sec, b.first.tv_nsec);
  });
  const size_t keep = maxEntries_ - maxEntries_ / 4;
  for (size_t i = 0; i + keep < entries.size(); ++i)
    ::unlink(entries[i].second.c_str());
}

bool DiskCache::capture(
    const std::function<void(const std::string &path)> &write,
    std::string &bytes, std::string *why) const {
  if (!makeDirs(dir_, why))
    return false;
  std::string tmp = dir_ + "/capture.XXXXXX";
  const int fd = ::mkstemp(tmp.data());
  if (fd < 0) {
    *why = "cannot create a temporary in " + dir_ + ": " + errnoText();
    return false;
  }
  ::close(fd);
  write(tmp);
  const bool ok = readFile(tmp, bytes) && !bytes.empty();
  ::unlink(tmp.c_str());
  if (!ok)
    *why = "nothing was written to " + tmp;
  return ok;
}

void DiskCache::remove(std::string_view key) const {
  ::unlink(pathOf(key).c_str());
}

} // namespace attnkit::compiled
