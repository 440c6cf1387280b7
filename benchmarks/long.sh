#!/bin/bash
# Issue #22: every encoding evaluates one sequence of LENGTHS tokens (bench.py --sections=long), one process and
# one JSON per encoding (a process's peak is its own), so an interrupted run resumes (existing files are kept).
# Run from the repository root:
#     bash benchmarks/long.sh                     # 65,536 tokens, every encoding on its default path
#     bash benchmarks/long.sh 16384,32768         # 16k and 32k
#     bash benchmarks/long.sh 16384,32768 flex    # the biases by FlexAttention compiled on CPU instead
# docs/speed.md's tables are generated from the JSON files (python -m tools.docs).
set -e
lengths=${1:-65536}
kernels=${2:-default}
out=benchmarks/raw/issue22_${lengths//,/_}_$kernels
[ "$lengths" = 65536 ] && [ "$kernels" = default ] && out=benchmarks/raw/issue22_64k
mkdir -p $out
for enc in $(python -c "import positional; print(' '.join(positional.REGISTRY))"); do
  kernel=
  case $enc in learned) continue;; alibi|kerple|t5|rope+alibi) [ "$kernels" = flex ] && kernel=--long_kernel=flex;; esac
  [ -f "$out/$enc.json" ] && continue
  # RoPE just before, in a process of its own: its seconds go into the encoding's JSON as rope_s, the time the
  # table divides by (the machine's load then, not the RoPE row's); older JSONs without them use the RoPE row
  python bench.py --sections=long --long_lengths=$lengths --threads=1 --encodings=rope --json="$out/.rope.tmp" >/dev/null
  python bench.py --sections=long --long_lengths=$lengths --threads=1 $kernel --encodings=$enc --json="$out/$enc.json.tmp"
  python -m tools.rope_time "$out/.rope.tmp" "$out/$enc.json.tmp"
  mv "$out/$enc.json.tmp" "$out/$enc.json"
  rm -f "$out/.rope.tmp"
done
