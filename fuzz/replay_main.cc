// Replay driver: runs a libFuzzer target's LLVMFuzzerTestOneInput over every
// file named on the command line (directories are walked), so the targets and
// their corpora run in ctest under any compiler, without libFuzzer.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "runtime/flags.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

void RunFile(const std::filesystem::path& path, int* count) {
  std::ifstream in(path, std::ios::binary);
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)),
                                std::istreambuf_iterator<char>());
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()),
                         bytes.size());
  ++*count;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> inputs;
  const std::string program = argv[0];
  attnkit::FlagParser flags(
      program + " FILE|DIR...",
      "Runs the fuzz target over every file named (directories are walked);\n"
      "exit 1 if there was none.");
  flags.Positional(&inputs);
  if (const attnkit::Status s = flags.Parse(argc - 1, argv + 1); !s.ok()) {
    std::fprintf(stderr, "replay: %s\n", s.message().c_str());
    return 2;
  }
  if (flags.help()) {
    std::fputs(flags.Usage().c_str(), stdout);
    return 0;
  }
  int count = 0;
  for (const std::string& input : inputs) {
    const std::filesystem::path p(input);
    if (std::filesystem::is_directory(p)) {
      for (const auto& e : std::filesystem::recursive_directory_iterator(p)) {
        if (e.is_regular_file()) RunFile(e.path(), &count);
      }
    } else if (std::filesystem::is_regular_file(p)) {
      RunFile(p, &count);
    } else {
      std::fprintf(stderr, "replay: %s does not exist\n", input.c_str());
      return 2;
    }
  }
  std::printf("replayed %d inputs\n", count);
  // An empty corpus means the test checked nothing: fail loudly.
  return count > 0 ? 0 : 1;
}
