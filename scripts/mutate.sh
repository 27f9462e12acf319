#!/usr/bin/env bash
# Mutation testing: applies each mutation listed in scripts/mutations.txt, one at a time,
# to a throwaway copy of this tree, runs the tests, and reports whether they caught it
# (a failing test run). The working tree is never touched.
#
#   bash scripts/mutate.sh              # every mutation, whole suite (no -race), minutes each
#   bash scripts/mutate.sh 3 7          # mutations 3 and 7 only
#   MUTATE_TEST="./storage/..." bash scripts/mutate.sh 1   # a narrower go test target
#
# A line of mutations.txt is: id | file | perl substitution | what it breaks. A
# substitution that matches nothing is reported as "did not apply", never as caught.
set -euo pipefail
cd "$(dirname "$0")/.."
src=$(pwd)
tmp=$(mktemp -d -t leaderboard-mutate.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
# pristine is this tree as it was when the run began; work is where mutations are tried.
pristine=$tmp/pristine work=$tmp/work
for d in "$pristine" "$work"; do
  rsync -a --exclude .git --exclude bin --exclude bench-results --exclude test-artifacts --exclude .data "$src/" "$d/"
done
bash scripts/services.sh >/dev/null
target=${MUTATE_TEST:-./...}
wanted=" $* "
caught=0 missed=0 total=0
printf '%-4s %-9s %s\n' id result mutation
while IFS='|' read -r id file subst what; do
  id=$(echo "$id" | xargs); file=$(echo "$file" | xargs); subst=$(echo "$subst" | sed 's/^ *//; s/ *$//')
  [[ -z "$id" || "$id" == \#* ]] && continue
  [[ "$wanted" != "  " && "$wanted" != *" $id "* ]] && continue
  total=$((total + 1))
  perl -0pi -e "$subst" "$work/$file"
  if cmp -s "$pristine/$file" "$work/$file"; then
    printf '%-4s %-9s %s\n' "$id" "NO-APPLY" "$what"
    continue
  fi
  log="$tmp/mutation-$id.log"
  if (cd "$work" && go test -count=1 -failfast -timeout 6m $target >"$log" 2>&1); then
    missed=$((missed + 1)); result=MISSED
  elif grep -qE '\[build failed\]|\[setup failed\]' "$log"; then
    result=NO-BUILD # the mutation does not compile: a bad mutation, not a caught one
  else
    caught=$((caught + 1)); result=caught
    failed=$(grep -m1 -E '^(--- FAIL|FAIL|.*\[build failed\])' "$log" | cut -c1-80 || true)
    what="$what  [$failed]"
  fi
  printf '%-4s %-9s %s\n' "$id" "$result" "$what"
  cp "$pristine/$file" "$work/$file"
done < "$pristine/scripts/mutations.txt"
echo "mutate: $caught of $total caught, $missed missed (the others did not apply or build)"
[ "$missed" -eq 0 ]
