#!/bin/bash
# Issue #52: the encodings added after the 16k/32k table of docs/speed.md at LENGTH tokens (16,384 by default), one
# process each after a RoPE run of its own (its seconds go into the encoding's JSON as rope_s: tools/rope_time.py);
# an encoding whose JSON exists is skipped (delete it to measure again). Run from the repository root:
#     bash benchmarks/long_new.sh           # 16,384 tokens -> benchmarks/raw/issue52_16384_new/
#     bash benchmarks/long_new.sh 65536     # 65,536 tokens -> benchmarks/raw/issue52_65536_new/
#     ENCODINGS="dape path" bash benchmarks/long_new.sh 65536
# docs/speed.md's tables are generated from the JSON files (python -m tools.docs).
set -e
length=${1:-16384}
out=benchmarks/raw/issue52_${length}_new
mkdir -p "$out"
for enc in ${ENCODINGS:-hope comrope abacus coupling dape stick_breaking path}; do
  [ -f "$out/$enc.json" ] && continue
  python bench.py --sections=long --long_lengths=$length --threads=1 --encodings=rope --json="$out/.rope.tmp" >/dev/null
  python bench.py --sections=long --long_lengths=$length --threads=1 --encodings=$enc --json="$out/$enc.json.tmp"
  python -m tools.rope_time "$out/.rope.tmp" "$out/$enc.json.tmp"
  mv "$out/$enc.json.tmp" "$out/$enc.json"
  cp "$out/.rope.tmp" "$out/rope.json"   # the last RoPE run: the memory the table divides by
done
rm -f "$out/.rope.tmp"
