// attnkit_decode: the decode report on its own (`./attnkit decode`), and the
// second half of `./attnkit check`. Linked with the counting allocation hooks
// (attnkit_alloc_hooks), which it needs to verify "0 allocations per step".
#include "decode/report.h"

int main(int argc, char** argv) {
  return attnkit::decode::DecodeMain(argc - 1, argv + 1);
}
