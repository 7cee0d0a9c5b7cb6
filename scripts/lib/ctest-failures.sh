#!/usr/bin/env bash
# Prints, for every test that failed in the given ctest logs (ctest run with
# --output-on-failure), its name and the last LINES lines of its output. scripts/test.sh ends
# with this when a test failed: CI keeps only the end of the suite's output, and a failure's
# own lines are printed minutes earlier, between hundreds of others.
# Usage: scripts/lib/ctest-failures.sh [-n LINES] [--] LOG...   (LINES: 30 unless given)
# It only prints: the suite's exit status comes from ctest. A test whose output holds a line
# shaped like ctest's own can cut its block short or add a row here, and change nothing else.
set -euo pipefail
lines=30
if [[ ${1:-} == -n ]]; then
  [[ ${2:-} =~ ^[1-9][0-9]{0,5}$ ]] ||
    { echo "ctest-failures.sh: -n '${2:-}': give a line count from 1 to 999999" >&2; exit 2; }
  lines=$2
  shift 2
fi
[[ ${1:-} == -- ]] && shift
for log in "$@"; do
  [[ -f $log ]] || continue
  # A test's output follows its result line ("12/66 Test #76: name ....***Failed 19.58 sec")
  # and ends at the next ctest line: a test's start or result, or the summary.
  awk -v keep="$lines" -v file="$log" '
    function flush() {
      if (name == "") return
      if (n == 0) printf "--- %s (in %s), no output\n", name, file
      else printf "--- %s (in %s), the last %d of its %d lines of output:\n", name, file, \
        (n < keep ? n : keep), n
      for (i = (n > keep ? n - keep + 1 : 1); i <= n; i++) print "  " out[i]
      name = ""; n = 0
    }
    /^ *Start +[0-9]+: / || /^ *[0-9]+\/[0-9]+ Test +#[0-9]+: / || /^[0-9]+% tests passed/ {
      flush()
    }
    /^ *[0-9]+\/[0-9]+ Test +#[0-9]+: / && !/ Passed / && !/ Skipped/ {
      name = $0
      sub(/^ *[0-9]+\/[0-9]+ Test +#[0-9]+: /, "", name)
      sub(/ *\.\.+ */, ": ", name)
      gsub(/ +/, " ", name)
      next
    }
    # The closing tally of Catch2 and blank lines say nothing the result line does not.
    name != "" && !/^(=+|test cases:.*|assertions:.*| *)$/ { out[++n] = $0 }
    END { flush() }' "$log"
done
