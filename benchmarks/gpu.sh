#!/bin/bash
# Issue #22's CUDA figures in one call, for a session lent a GPU (the device tool runs it from the repository root;
# $OUT comes back): the long evaluation forward of every encoding at 4k-64k tokens, and the peak memory of a training
# step at L = 1024 and 2048 (bench.py's shape, batch 8). The card is named in card.txt; each JSON names its command.
#     bash benchmarks/gpu.sh                                     # on the GPU machine
#     DEVICE=cpu LENGTHS=256 BLOCKS=64 ENCODINGS=rope,alibi bash benchmarks/gpu.sh   # the script itself, anywhere
set -e
out=${OUT:-benchmarks/raw/gpu}
device=${DEVICE:-cuda}
lengths=${LENGTHS:-4096,16384,32768,65536}
blocks=${BLOCKS:-1024 2048}
encodings=${ENCODINGS:-$(python -c "import positional; print(','.join(n for n in positional.REGISTRY if n != 'learned'))")}
mkdir -p "$out"
{ nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null || echo "no nvidia-smi ($device)"; } > "$out/card.txt"
python bench.py --device=$device --sections=long --long_lengths=$lengths --encodings=$encodings \
    --json="$out/long.json" | tee "$out/long.txt"
for L in $blocks; do
  python bench.py --device=$device --sections=train_memory --block_size=$L --batch_size=8 --encodings=$encodings \
      --json="$out/train_memory_$L.json" | tee "$out/train_memory_$L.txt"
done
