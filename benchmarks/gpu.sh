#!/bin/bash
# Issue #22's CUDA figures in one call, for a session lent a GPU (the device tool runs it from the repository root;
# $OUT comes back: card.txt, log.txt, raw.tgz of the JSON files). Three phases, each under a time limit so that
# what finished comes back:
#   1. in parallel: benchmarks/gpu_check.py (every CUDA path against the CPU's) and, one process per bias
#      encoding, bench.py's long and train_memory sections (their peaks are per process; their seconds are
#      contended, and they fill inductor's cache for FlexAttention's compilations)
#   2. one process at a time (the timed figures): the long evaluation forward of every encoding at 4k-64k tokens,
#      an encoding a process, each at most CAP seconds (one slow encoding does not take the phase)
#   3. the peak memory of a training step at L = 1024 and 2048 (bench.py's shape, batch 8), every encoding
#     bash benchmarks/gpu.sh                                     # on the GPU machine
#     DEVICE=cpu LENGTHS=256 BLOCKS=64 ENCODINGS=rope,alibi,shaw LIMIT=60 bash benchmarks/gpu.sh   # the script, anywhere
out=${OUT:-benchmarks/raw/gpu}
raw=${RAW:-/tmp/gpu_raw}
device=${DEVICE:-cuda}
lengths=${LENGTHS:-4096,16384,32768,65536}
blocks=${BLOCKS:-1024 2048}
limit=${LIMIT:-170}           # seconds for each phase
cap=${CAP:-45}                # seconds for one encoding's process in phase 2
export PYTHONUNBUFFERED=1 PYTHONPATH=. TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-/tmp/gpu_inductor}
all=${ENCODINGS:-$(python3 -c "import positional; print(','.join(n for n in positional.REGISTRY if n != 'learned'))")}
biased=$(python3 -c "import positional, sys; print(' '.join(n for n in sys.argv[1].split(',')
    if positional.REGISTRY[n].overrides('score_bias')))" "$all")
groups=$(python3 -c "import sys; e = sys.argv[1].split(','); print(' '.join(','.join(e[i:i + 4]) for i in range(0, len(e), 4)))" "$all")
mkdir -p "$out" "$raw"
log="$out/log.txt"
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "no nvidia-smi ($device)"
  python3 -c "import torch; print('torch', torch.__version__)"; nproc; } > "$out/card.txt"
cat "$out/card.txt" | tee -a "$log"
echo "== phase 1 (parallel): checks; bias encodings warm $(date -u +%T)" | tee -a "$log"
plain=$(python3 -c "import sys; b = sys.argv[2].split(); print(','.join(n for n in sys.argv[1].split(',') if n not in b))" \
    "$all" "$biased")
for part in plain biased; do   # the bias encodings' compilations in a process of their own
  encs=${!part}
  timeout $limit python3 benchmarks/gpu_check.py --device=$device --encodings=${encs// /,} \
      --json="$raw/check_$part.json" > "$raw/check_$part.txt" 2>&1 &
done
end=$((SECONDS + limit))
left() { local s=$((end - SECONDS)); [ $s -gt 5 ] && echo $s || echo 1; }   # the phase's seconds left
for e in $biased; do
  ( timeout $(left) python3 bench.py --device=$device --sections=long --long_lengths=$lengths --encodings=$e \
        --json="$raw/warm_long_$e.json"
    for L in $blocks; do
      timeout $(left) python3 bench.py --device=$device --sections=train_memory --block_size=$L --batch_size=8 \
          --encodings=$e --json="$raw/warm_train_${L}_$e.json"
    done ) > "$raw/warm_$e.txt" 2>&1 &
done
wait
cat "$raw"/check_*.txt "$raw"/warm_*.txt >> "$log"
echo "== phase 2 (one at a time): long evaluation $(date -u +%T)" | tee -a "$log"
end=$((SECONDS + limit))
for e in ${all//,/ }; do
  left=$((end - SECONDS)); [ $left -le 5 ] && { echo "phase 2 out of time before $e" | tee -a "$log"; break; }
  timeout $((left < cap ? left : cap)) python3 bench.py --device=$device --sections=long --long_lengths=$lengths \
      --encodings=$e --json="$raw/long_$e.json" 2>&1 | tee -a "$log"
done
echo "== phase 3 (one at a time): training step memory $(date -u +%T)" | tee -a "$log"
end=$((SECONDS + limit))
for L in $blocks; do
  for g in $groups; do
    left=$((end - SECONDS)); [ $left -le 5 ] && { echo "phase 3 out of time before $L $g" | tee -a "$log"; break 2; }
    timeout $left python3 bench.py --device=$device --sections=train_memory --block_size=$L --batch_size=8 \
        --encodings=$g --json="$raw/train_memory_${L}_${g//,/_}.json" 2>&1 | tee -a "$log"
  done
done
echo "== done $(date -u +%T)" | tee -a "$log"
tar czf "$out/raw.tgz" -C "$raw" .
