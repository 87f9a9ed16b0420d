// The on-disk kernel cache: the object code of JIT-compiled kernels, kept
// between processes so that a warm `check` (or a CI shard on the same
// machine) compiles nothing. No MLIR or LLVM headers here.
//
// An entry is one file, named by a hash of its key, holding the whole key
// text, the object's size and SHA-256, then the object. The key names
// everything that determines the code (jit.cc: the kernel spec, tile and
// optimization options, LLVM version, host CPU and features, and a hash of
// the compiled tier's sources). An entry is verified before it is used: a
// truncated, corrupt or foreign file is removed and the kernel rebuilt,
// never executed. Entries are written to a temporary beside them and
// renamed into place, so concurrent processes (CI shards on one machine)
// see a whole entry or none; two writers of one key write the same bytes.
#ifndef ATTNKIT_COMPILED_DISK_CACHE_H_
#define ATTNKIT_COMPILED_DISK_CACHE_H_

#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace attnkit::compiled {

class DiskCache {
public:
  /// The directory in force: $ATTNKIT_KERNEL_CACHE when set ("off" or ""
  /// disables the cache: returns ""), else $XDG_CACHE_HOME/attnkit/kernels,
  /// else $HOME/.cache/attnkit/kernels ("" without a home).
  static std::string defaultDir();

  /// ~14-50 KB an entry: a few thousand are tens of MB.
  static constexpr size_t kDefaultMaxEntries = 4096;

  /// A cache in `dir` (created, mode 0700, on the first store).
  explicit DiskCache(std::string dir, size_t maxEntries = kDefaultMaxEntries)
      : dir_(std::move(dir)), maxEntries_(maxEntries) {}
  const std::string &dir() const { return dir_; }

  /// The file of `key`.
  std::string pathOf(std::string_view key) const;

  /// The verified object stored for `key`; nullopt when there is none, or
  /// when the entry was corrupt or not this key's (then it is removed and
  /// `why` says what was wrong).
  std::optional<std::string> load(std::string_view key, std::string *why) const;

  /// Stores `object` for `key`: temporary file, fsync, rename. False with
  /// `why` on failure (a cache that cannot be written never fails a
  /// compile). Then prunes: past `maxEntries` entries, the least recently
  /// used (a load touches its entry) go until a quarter of the room is
  /// free; temporaries a crashed writer left are removed after an hour.
  bool store(std::string_view key, std::string_view object,
             std::string *why) const;

  /// The bytes a writer puts in a file: `write(path)` gets a fresh temporary
  /// path inside the cache directory, which is read back and removed.
  /// False with `why` when the directory or the file fails.
  bool capture(const std::function<void(const std::string &path)> &write,
               std::string &bytes, std::string *why) const;

  /// Removes the entry of `key` (one that loaded but did not link).
  void remove(std::string_view key) const;

  /// SHA-256 of `bytes`, 64 lowercase hex digits.
  static std::string sha256Hex(std::string_view bytes);

private:
  void prune() const;

  std::string dir_;
  size_t maxEntries_;
};

} // namespace attnkit::compiled

#endif // ATTNKIT_COMPILED_DISK_CACHE_H_
