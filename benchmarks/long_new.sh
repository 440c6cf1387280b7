#!/bin/bash
set -e
# Issue #52: the encodings added after the 16k/32k table of docs/speed.md, at 16,384 tokens, one process each after a
# RoPE run of its own (rope_s); run from the repository root: bash benchmarks/long_new.sh
out=benchmarks/raw/issue52_16384_new
for enc in ${ENCODINGS:-hope comrope abacus coupling dape stick_breaking path}; do
  [ -f "$out/$enc.json" ] && continue
  python bench.py --sections=long --long_lengths=16384 --threads=1 --encodings=rope --json="$out/.rope.tmp" >/dev/null
  python bench.py --sections=long --long_lengths=16384 --threads=1 --encodings=$enc --json="$out/$enc.json.tmp"
  python -c "import json, sys; r, e = (json.load(open(p)) for p in sys.argv[1:3]); [c.update(rope_s=r['long']['rope'][T]['s'])
for by_T in e['long'].values() for T, c in by_T.items()]; json.dump(e, open(sys.argv[2], 'w'), indent=1)" "$out/.rope.tmp" "$out/$enc.json.tmp"
  mv "$out/$enc.json.tmp" "$out/$enc.json"
done
cp $out/.rope.tmp $out/rope.json
