#!/bin/bash
# Golden files for `dtlaunch --dry-run --format json`: each NAME.case holds an environment (one
# NAME=value a line) and an `args:` line of dtlaunch options; NAME.json is what dtlaunch prints
# for it, pretty-printed with python3 -m json.tool so that a change reads as a diff. dtlaunch
# runs under `env -i` with only the case's variables (PATH=/usr/bin:/bin unless the case sets it)
# and the program `true`.
#
#   tests/golden/check.sh DTLAUNCH             compare every case (ctest: golden.dry_run_json)
#   tests/golden/check.sh --update DTLAUNCH    rewrite the .json files; review `git diff` by eye
set -u
update=0
if [ "${1:-}" = --update ]; then update=1; shift; fi
dtlaunch=${1:?usage: check.sh [--update] DTLAUNCH}
dir=$(cd "$(dirname "$0")" && pwd)
failed=0
for case_file in "$dir"/*.case; do
  name=$(basename "$case_file" .case)
  vars=(PATH=/usr/bin:/bin)
  args=()
  while IFS= read -r line || [ -n "$line" ]; do
    case "$line" in
      '' | '#'*) ;;
      args:*) read -r -a args <<<"${line#args:}" ;;
      *=*) vars+=("$line") ;;
      *) echo "golden: $name.case: cannot read line '$line'" >&2; exit 2 ;;
    esac
  done <"$case_file"
  if ! out=$(env -i "${vars[@]}" "$dtlaunch" --dry-run --format json "${args[@]}" true 2>&1); then
    echo "golden: $name: dtlaunch failed: $out" >&2
    failed=1
    continue
  fi
  if ! pretty=$(printf '%s\n' "$out" | python3 -m json.tool); then
    echo "golden: $name: not JSON: $out" >&2
    failed=1
    continue
  fi
  if [ $update = 1 ]; then
    printf '%s\n' "$pretty" >"$dir/$name.json"
  elif ! diff -u "$dir/$name.json" <(printf '%s\n' "$pretty") >&2; then
    echo "golden: $name: output differs from $name.json (above); if intended: $0 --update" >&2
    failed=1
  fi
done
exit $failed
