#!/usr/bin/env bash
# Keeps README's "Packages" table equal to the package list ./attnkit installs
# (`./attnkit packages`): every package with the same one-line purpose, no
# package in one and not the other. Run by ctest (readme_packages).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
want="$("$root/attnkit" packages | awk '{ p = $1; $1 = ""; sub(/^ +/, ""); print p " | " $0 }')"
# README rows look like: | `pkg` | purpose |
have="$(sed -n '/^## Packages/,/^## /p' "$root/README.md" |
  sed -nE 's/^\| `([^`]+)` \| (.*) \|$/\1 | \2/p')"
if [ -z "$have" ]; then
  echo "README.md has no '## Packages' table of | \`package\` | purpose | rows" >&2
  exit 1
fi
if ! diff <(sort <<<"$want") <(sort <<<"$have") >&2; then
  echo "README.md's Packages table differs from ./attnkit packages (< list, > README)" >&2
  exit 1
fi
echo "README lists the $(wc -l <<<"$want") packages ./attnkit installs"
