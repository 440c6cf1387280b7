#!/bin/bash
# Issue #24's task recipes at budgets a 2-core CPU cannot run, for a session lent a GPU: the three tasks that no
# CPU trial has learned (addition, mqar, parity; docs/tasks.md "Recipes that learn"), as recipe trials
# (python -m tasks.trial) side by side on the one card, one process each. Every trial is stopped after LIMIT
# seconds if it has not finished (train.py saves on the SIGTERM) and scored at L = 32 on 200 held-out examples;
# its row (under `other`: device=..., and stopped_at=N if stopped) goes to $OUT/trials.csv, to be appended to
# reports/tasks-recipes/trials.csv (docs/tasks.md's table is generated from it). What each trial asks:
#   addition, 4 x 128 (its recipe's model), 3 seeds and learned positions: does a longer budget learn it reliably
#     (at 8000 iterations the CPU task suite learned it in 1 run of 27)? And the base model at the same budget.
#   mqar, Zoology's shape (2 layers x 128, no weight decay, batches of 64) over its learning-rate sweep 3e-4..1e-2
#     (Arora et al. 2023 sweep 1e-4..1e-2 for about 31,000 steps), RoPE and learned positions.
#   parity, 4 x 128, with and without a length curriculum.
#     bash benchmarks/task_recipes_gpu.sh                                              # on the GPU machine
#     DEVICE=cpu ITERS=40 LIMIT=60 bash benchmarks/task_recipes_gpu.sh               # the script, anywhere
out=${OUT:-benchmarks/raw/task_recipes_gpu}
device=${DEVICE:-cuda}
iters=${ITERS:-40000}         # each trial's schedule (max_iters); LIMIT may stop it first
limit=${LIMIT:-420}           # seconds of training per trial, all running at once
export PYTHONUNBUFFERED=1 TRIAL_THREADS=1
mkdir -p "$out"
log="$out/log.txt"
{ nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null || echo "no nvidia-smi ($device)"
  python3 -c "import torch; print('torch', torch.__version__)"; nproc; date -u +%FT%TZ; } | tee "$out/card.txt" >> "$log"
python3 -c "import tasks.trial as t; print(','.join(t.FIELDS))" > "$out/trials.csv"   # the header, before 12 writers
mqar="--n_layer=2 --n_embd=128 --weight_decay=0.0 --batch_size=64"
trials=(
  "addition rope --seed=1337"
  "addition rope --seed=1338"
  "addition rope --seed=1339"
  "addition learned --seed=1337"
  "addition rope --seed=1337 --n_layer=3 --n_embd=64"
  "mqar rope $mqar --learning_rate=3e-4"
  "mqar rope $mqar --learning_rate=1e-3"
  "mqar rope $mqar --learning_rate=3e-3"
  "mqar rope $mqar --learning_rate=1e-2"
  "mqar learned $mqar --learning_rate=1e-3"
  "parity rope --n_layer=4 --n_embd=128 --learning_rate=1e-3"
  "parity rope --n_layer=4 --n_embd=128 --learning_rate=1e-3 --curriculum_iters=$((iters / 2))"
)
for t in "${trials[@]}"; do
  # shellcheck disable=SC2086  # each trial's words are its arguments
  python3 -m tasks.trial $t --max_iters=$iters --device=$device --time_limit=$limit --trials="$out/trials.csv" \
      >> "$log" 2>&1 &
done
wait
echo "done $(date -u +%T)" >> "$log"
cat "$out/trials.csv"
