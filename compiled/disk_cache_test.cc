#include "compiled/disk_cache.h"
#include "compiled/jit.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace attnkit::compiled {
namespace {

namespace fs = std::filesystem;

/// A fresh directory under the test's temporary directory.
std::string freshDir(const std::string &name) {
  const fs::path p = fs::path(::testing::TempDir()) / ("attnkit_" + name);
  fs::remove_all(p);
  return p.string();
}

std::string readAll(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void writeAll(const std::string &path, const std::string &bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

TEST(DiskCacheTest, StoresAndLoadsAnEntry) {
  const DiskCache cache(freshDir("roundtrip") + "/a/b");
  std::string why;
  EXPECT_EQ(cache.load("key 1", &why), std::nullopt);
  EXPECT_EQ(why, ""); // absent is not an error
  const std::string object("\x7f"
                           "ELF\0\1\2 bytes",
                           14);
  ASSERT_TRUE(cache.store("key 1", object, &why)) << why;
  EXPECT_EQ(cache.load("key 1", &why), object);
  EXPECT_EQ(cache.load("key 2", &why), std::nullopt);
  // Only the owner may put code there.
  EXPECT_EQ(fs::status(cache.dir()).permissions() & fs::perms::all,
            fs::perms::owner_all);
  // No temporary is left behind.
  int files = 0;
  for (const auto &e : fs::directory_iterator(cache.dir())) {
    EXPECT_EQ(e.path().extension(), ".kernel") << e.path();
    ++files;
  }
  EXPECT_EQ(files, 1);
}

// Whatever happened to an entry's bytes, it is refused (never returned),
// removed, and the reason names the file.
TEST(DiskCacheTest, EveryDamagedEntryIsRefusedAndRemoved) {
  const DiskCache cache(freshDir("damaged"));
  const std::string key = "spec d64\ncpu znver5\n";
  const std::string object(4096, 'o');
  std::string why;
  ASSERT_TRUE(cache.store(key, object, &why)) << why;
  const std::string path = cache.pathOf(key);
  const std::string good = readAll(path);
  struct Damage {
    const char *name;
    std::string bytes;
    const char *reason;
  };
  std::string flipped = good;
  flipped[flipped.size() - 100] ^= 0x20;
  std::string otherMagic = good;
  otherMagic[21] = '2'; // "attnkit-kernel-cache 2"
  const std::vector<Damage> damages = {
      {"a flipped object byte", flipped, "SHA-256 (corrupt)"},
      {"truncated", good.substr(0, good.size() - 1), "truncated"},
      {"cut in the header", good.substr(0, 30), "truncated key"},
      {"a byte appended", good + "x", "expected (truncated)"},
      {"another format version", otherMagic, "of this version"},
      {"empty", "", "of this version"},
  };
  for (const Damage &d : damages) {
    SCOPED_TRACE(d.name);
    writeAll(path, d.bytes);
    why.clear();
    EXPECT_EQ(cache.load(key, &why), std::nullopt);
    EXPECT_NE(why.find(path), std::string::npos) << why;
    EXPECT_NE(why.find(d.reason), std::string::npos) << why;
    EXPECT_FALSE(fs::exists(path));
  }
}

TEST(DiskCacheTest, AnEntryOfAnotherKeyIsNotUsed) {
  const DiskCache cache(freshDir("foreign"));
  std::string why;
  ASSERT_TRUE(cache.store("key A", "object A", &why)) << why;
  fs::copy_file(cache.pathOf("key A"), cache.pathOf("key B"));
  EXPECT_EQ(cache.load("key B", &why), std::nullopt);
  EXPECT_NE(why.find("another key"), std::string::npos) << why;
  EXPECT_EQ(cache.load("key A", &why), "object A");
}

TEST(DiskCacheTest, AnUnwritableDirectoryIsAnErrorNamingIt) {
  const std::string base = freshDir("unwritable");
  fs::create_directories(base);
  writeAll(base + "/file", "not a directory");
  const DiskCache cache(base + "/file/kernels");
  std::string why;
  EXPECT_FALSE(cache.store("k", "o", &why));
  EXPECT_NE(why.find(base + "/file/kernels"), std::string::npos) << why;
  EXPECT_EQ(cache.load("k", &why), std::nullopt);
}

// Writers of one key at once (CI shards on one machine) and a reader: the
// reader sees the whole entry or none, never a damaged one.
TEST(DiskCacheTest, ConcurrentWritersLeaveWholeEntries) {
  const DiskCache cache(freshDir("concurrent"));
  const std::string object(200000, 'k');
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 20; ++i) {
        std::string why;
        EXPECT_TRUE(cache.store("one key", object, &why)) << why;
      }
    });
  }
  int seen = 0;
  for (int i = 0; i < 200; ++i) {
    std::string why;
    const std::optional<std::string> got = cache.load("one key", &why);
    EXPECT_EQ(why, "");
    if (got) {
      EXPECT_EQ(*got, object);
      ++seen;
    }
  }
  for (std::thread &t : threads)
    t.join();
  std::string why;
  EXPECT_EQ(cache.load("one key", &why), object);
  (void)seen;
}

// A bounded cache: past its room the least recently used entries go (a
// load counts as a use), and the newest entry always stays.
TEST(DiskCacheTest, PrunesTheLeastRecentlyUsedEntries) {
  const DiskCache cache(freshDir("prune"), 8);
  std::string why;
  auto age = [&](const std::string &key, int seconds) {
    fs::last_write_time(cache.pathOf(key), fs::file_time_type::clock::now() -
                                               std::chrono::seconds(seconds));
  };
  for (int i = 0; i < 8; ++i) {
    ASSERT_TRUE(cache.store("key " + std::to_string(i), "o", &why)) << why;
    age("key " + std::to_string(i), 1000 - i); // key 0 the oldest
  }
  ASSERT_TRUE(cache.load("key 0", &why)); // used: now the newest
  ASSERT_TRUE(cache.store("key 8", "o", &why)) << why;
  // 9 > 8: down to 6, the three least recently used (keys 1, 2, 3) gone.
  for (int i = 0; i <= 8; ++i) {
    const bool kept = i == 0 || i > 3;
    EXPECT_EQ(fs::exists(cache.pathOf("key " + std::to_string(i))), kept)
        << "key " << i;
  }
}

class ScopedEnv {
public:
  ScopedEnv(const char *name, const char *value) : name_(name) {
    if (const char *old = std::getenv(name))
      old_ = old;
    if (value)
      setenv(name, value, 1);
    else
      unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_)
      setenv(name_, old_->c_str(), 1);
    else
      unsetenv(name_);
  }

private:
  const char *name_;
  std::optional<std::string> old_;
};

TEST(DiskCacheTest, TheDefaultDirectoryFollowsTheEnvironment) {
  ScopedEnv home("HOME", "/home/u");
  {
    ScopedEnv e("ATTNKIT_KERNEL_CACHE", "/srv/kc");
    EXPECT_EQ(DiskCache::defaultDir(), "/srv/kc");
  }
  {
    ScopedEnv e("ATTNKIT_KERNEL_CACHE", "off");
    EXPECT_EQ(DiskCache::defaultDir(), "");
  }
  ScopedEnv none("ATTNKIT_KERNEL_CACHE", nullptr);
  {
    ScopedEnv x("XDG_CACHE_HOME", "/xdg");
    EXPECT_EQ(DiskCache::defaultDir(), "/xdg/attnkit/kernels");
  }
  ScopedEnv noXdg("XDG_CACHE_HOME", nullptr);
  EXPECT_EQ(DiskCache::defaultDir(), "/home/u/.cache/attnkit/kernels");
  ScopedEnv noHome("HOME", nullptr);
  EXPECT_EQ(DiskCache::defaultDir(), "");
}

/// A JIT-only kernel cache (no AOT kernels served) in `dir`.
CompileOptions jitInto(const std::string &dir) {
  CompileOptions o;
  o.useAot = false;
  o.diskCacheDir = dir;
  return o;
}

KernelSpec smallSpec() {
  KernelSpec s;
  s.headDim = 24;
  s.mask = MaskKind::kCausal;
  return s;
}

// A second process (here: a second cache) loads what the first compiled;
// the kernel it gets is the same code (same results, bit for bit, is what
// harness/test/kernel_cache.test checks through the whole campaign).
TEST(KernelDiskCacheTest, ASecondCacheLoadsWhatTheFirstCompiled) {
  const std::string dir = freshDir("kernels");
  std::string err;
  KernelCache cold(jitInto(dir));
  const CompiledKernel *a = cold.get(smallSpec(), err);
  ASSERT_NE(a, nullptr) << err;
  EXPECT_FALSE(a->fromDisk());
  EXPECT_EQ(cold.compilations(), 1);
  EXPECT_EQ(cold.diskStores(), 1);
  const CompiledKernel *append = cold.getAppend(AppendSpec{}, err);
  ASSERT_NE(append, nullptr) << err;
  EXPECT_EQ(cold.diskStores(), 2);

  KernelCache warm(jitInto(dir));
  const CompiledKernel *b = warm.get(smallSpec(), err);
  ASSERT_NE(b, nullptr) << err;
  EXPECT_TRUE(b->fromDisk());
  EXPECT_NE(b->fn(), nullptr);
  EXPECT_EQ(b->spec(), smallSpec());
  EXPECT_NE(warm.getAppend(AppendSpec{}, err), nullptr) << err;
  EXPECT_EQ(warm.compilations(), 0);
  EXPECT_EQ(warm.diskLoads(), 2);
}

// An entry that verifies but does not link (its bytes are not an object)
// is removed and the kernel compiled again: never executed.
TEST(KernelDiskCacheTest, AnEntryThatDoesNotLinkIsRebuilt) {
  const std::string dir = freshDir("garbage");
  KernelCache cache(jitInto(dir));
  const DiskCache disk(dir);
  const std::string key = cache.diskKey(smallSpec().key());
  std::string why, err;
  ASSERT_TRUE(disk.store(key, "not an object file", &why)) << why;
  const CompiledKernel *k = cache.get(smallSpec(), err);
  ASSERT_NE(k, nullptr) << err;
  EXPECT_FALSE(k->fromDisk());
  EXPECT_EQ(cache.compilations(), 1);
  EXPECT_EQ(cache.diskLoads(), 0);
  // Rewritten with the real object.
  const std::optional<std::string> stored = disk.load(key, &why);
  ASSERT_TRUE(stored.has_value()) << why;
  EXPECT_EQ(stored->substr(0, 4), "\x7f"
                                  "ELF");
}

// The key names what decides the code: another option, another entry.
TEST(KernelDiskCacheTest, TheKeyNamesEverythingThatDecidesTheCode) {
  CompileOptions a = jitInto("/unused"), b = a;
  b.llvmOptLevel = 2;
  const std::string key = KernelCache(a).diskKey("d24_f32_causal_v_g1");
  EXPECT_NE(key, KernelCache(b).diskKey("d24_f32_causal_v_g1"));
  for (const char *part : {"spec d24_f32_causal_v_g1\n", "llvm_opt 3\n",
                           "\nllvm ", "\ncpu ", "\nfeatures +", "\nsources "})
    EXPECT_NE(key.find(part), std::string::npos) << part << " in\n" << key;
}

} // namespace
} // namespace attnkit::compiled
