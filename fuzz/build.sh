#!/bin/bash -eu
# OSS-Fuzz / ClusterFuzzLite build script. The builder provides $SRC, $OUT,
# $CC, $CXX, $CFLAGS, $CXXFLAGS (with the sanitizer and -fsanitize=fuzzer-no-link)
# and $LIB_FUZZING_ENGINE. Every fuzz/*_fuzz.cc becomes $OUT/<name> with its
# seed corpus ($OUT/<name>_seed_corpus.zip) and dictionary ($OUT/<name>.dict).
# The MLIR backend stays off unless ATTNKIT_BUILD_COMPILED=ON is exported (it
# needs Debian's llvm-22/mlir-22 packages in the builder image).
SRC_DIR="${SRC:-$(cd "$(dirname "$0")/.." && pwd)}"
[ -f "$SRC_DIR/attnkit" ] || SRC_DIR="$SRC_DIR/attnkit"
BUILD="${WORK:-/tmp}/attnkit-fuzz-build"

cmake -S "$SRC_DIR" -B "$BUILD" -G Ninja \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER="$CC" -DCMAKE_CXX_COMPILER="$CXX" \
  -DCMAKE_C_FLAGS="$CFLAGS" -DCMAKE_CXX_FLAGS="$CXXFLAGS" \
  -DATTNKIT_BUILD_FUZZERS=ON -DATTNKIT_FUZZ_ENGINE="$LIB_FUZZING_ENGINE" \
  -DATTNKIT_BUILD_TESTS=OFF -DATTNKIT_BUILD_BENCHMARKS=OFF \
  -DATTNKIT_BUILD_COMPILED="${ATTNKIT_BUILD_COMPILED:-OFF}" \
  -DATTNKIT_NATIVE=OFF
cmake --build "$BUILD" --target attnkit_fuzzers -j "$(nproc)"

for src in "$SRC_DIR"/fuzz/*_fuzz.cc; do
  name="$(basename "$src" .cc)"
  cp "$BUILD/fuzz/$name" "$OUT/"
  if [ -d "$SRC_DIR/fuzz/corpus/$name" ]; then
    (cd "$SRC_DIR/fuzz/corpus/$name" && zip -q -r "$OUT/${name}_seed_corpus.zip" .)
  fi
  [ -f "$SRC_DIR/fuzz/$name.dict" ] && cp "$SRC_DIR/fuzz/$name.dict" "$OUT/"
done
