#!/usr/bin/env bash
# Keeps the layers honest: a file may include (#include "folder/...") only
# its own folder and the floors below it. Floors, lowest first:
#   0 runtime
#   1 reference simd compiled plugin   (siblings: none includes another)
#   2 backends                         (the registry: links every backend)
#   3 decode
#   4 harness bench                    (siblings)
#   5 fuzz python                      (siblings)
# One exception, for tests only: a backend's *_test.cc may include
# harness/test_support.h, the shared comparison against the f64 oracle
# through the harness's tolerance model. Run by ctest (layers).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
declare -A floor=(
  [runtime]=0 [reference]=1 [simd]=1 [compiled]=1 [plugin]=1
  [backends]=2 [decode]=3 [harness]=4 [bench]=4 [fuzz]=5 [python]=5
)
bad=0
while IFS= read -r file; do
  from="${file%%/*}"
  [ -n "${floor[$from]:-}" ] || continue
  while IFS= read -r line; do
    inc="$(sed -E 's/^#include "([^"]+)".*/\1/' <<<"$line")"
    to="${inc%%/*}"
    [ "$to" != "$inc" ] || continue           # no folder: not ours
    [ -n "${floor[$to]:-}" ] || continue      # a system/third-party path
    [ "$to" = "$from" ] && continue
    if [[ "$file" == *_test.cc && "$inc" == harness/test_support.h ]]; then
      continue
    fi
    if [ "${floor[$to]}" -ge "${floor[$from]}" ]; then
      what="up"
      [ "${floor[$to]}" -eq "${floor[$from]}" ] && what="sideways"
      echo "$file includes $inc: $what from $from (floor ${floor[$from]})" \
        "to $to (floor ${floor[$to]})" >&2
      bad=1
    fi
  done < <(grep -E '^#include "' "$file" || true)
done < <(git ls-files '*.h' '*.cc' '*.c' '*.inc')
if [ "$bad" != 0 ]; then
  echo "layers: includes above run against the floors (tools/check_layers.sh)" >&2
  exit 1
fi
echo "layers: every include runs down or within its folder"
