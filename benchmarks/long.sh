#!/bin/bash
# Issue #22: every encoding evaluates one sequence of LENGTHS tokens (bench.py --sections=long), one process and
# one JSON per encoding (a process's peak is its own), so an interrupted run resumes (existing files are kept).
# Run from the repository root:
#     bash benchmarks/long.sh                     # 65,536 tokens, ALiBi, Kerple, T5, RoPE+ALiBi by FlexAttention
#     bash benchmarks/long.sh 16384,32768 blocks  # 16k and 32k, every encoding on its default path
# docs/speed.md's tables are generated from the JSON files (python -m tests.test_docs).
set -e
lengths=${1:-65536}
kernels=${2:-flex}
out=benchmarks/raw/issue22_$( [ "$lengths" = 65536 ] && echo 64k || echo "${lengths//,/_}_$kernels" )
mkdir -p $out
for enc in $(python -c "import positional; print(' '.join(positional.REGISTRY))"); do
  kernel=
  case $enc in learned) continue;; alibi|kerple|t5|rope+alibi) [ "$kernels" = flex ] && kernel=--long_kernel=flex;; esac
  [ -f "$out/$enc.json" ] && continue
  python bench.py --sections=long --long_lengths=$lengths --threads=1 $kernel --encodings=$enc --json="$out/$enc.json.tmp"
  mv "$out/$enc.json.tmp" "$out/$enc.json"
done
