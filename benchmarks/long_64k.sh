#!/bin/bash
# Issue #22: every encoding evaluates one sequence of 65,536 tokens (bench.py --sections=long), one process and
# one JSON per encoding in benchmarks/raw/issue22_64k/, so an interrupted run resumes (existing files are kept).
# The bias encodings FlexAttention can compile run with --long_kernel=flex. Run from the repository root:
#     bash benchmarks/long_64k.sh
# docs/speed.md's table is generated from the JSON files (python -m tests.test_docs).
set -e
out=benchmarks/raw/issue22_64k
mkdir -p $out
for enc in $(python -c "import positional; print(' '.join(positional.REGISTRY))"); do
  case $enc in learned) continue;; alibi|kerple|t5|rope+alibi) kernel=--long_kernel=flex;; *) kernel=;; esac
  [ -f "$out/$enc.json" ] && continue
  python bench.py --sections=long --long_lengths=65536 --threads=1 $kernel --encodings=$enc --json="$out/$enc.json.tmp"
  mv "$out/$enc.json.tmp" "$out/$enc.json"
done
