#!/bin/sh
# Issue #52: CoPE's training step against RoPE's at 1,024, 2,048 and 4,096 tokens, a process a length (bench.py's
# train and train_memory sections: 4 layers x 4 heads x 128, one sequence a step, one thread): the step's median
# wall and CPU time over 2 rounds, the encodings alternating, then one step's process peak after a warm-up step.
# RUN names the code measured (before, after); docs/speed.md's table is generated from the JSONs (python -m tools.docs).
#   nice -n 5 sh benchmarks/cope_memory.sh after
run=${1:?give the run a name, e.g. after}
out=benchmarks/raw/issue52_cope_train_memory
mkdir -p "$out"
for L in 1024 2048 4096; do
    python bench.py --sections=train,train_memory --encodings=rope,cope --block_size=$L --batch_size=1 --threads=1 \
        --rounds=2 --steps=1 --json="$out/${run}_L$L.json" || exit 1
done
