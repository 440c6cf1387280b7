#!/bin/bash
# Issue #24's task recipes at budgets a 2-core CPU cannot run, for a session lent a GPU: the two tasks that the CPU
# task suite left unlearned (docs/results.md's mastery table: addition learned by RoPE alone, parity by none), as
# recipe trials (python -m tasks.trial) side by side on the one card, one process each. Every trial is stopped after
# LIMIT seconds if it has not finished (train.py saves on the SIGTERM) and scored at L = 32 on 200 held-out examples;
# its row (under `other`: device=..., and stopped_at=N if stopped) goes to $OUT/trials.csv, to be appended to
# reports/tasks-recipes/trials.csv (docs/tasks.md's table is generated from it). What each trial asks:
#   addition on its recipe (configs/tasks/addition.py: 4 x 128, head untied, embed_std=1.0) at ITERS iterations
#     (the suite's 8000 three times over) for the encodings that did not learn it at 8000: NoPE, learned (two seeds),
#     sinusoidal, T5, ALiBi.
#   parity on 4 x 128 with mqar's fix (head untied, embed_std=1.0), with and without a length curriculum, at two
#     learning rates, RoPE and learned positions; and without the fix (the CPU trials' 4 x 128 row).
#     bash benchmarks/task_recipes_gpu.sh                                              # on the GPU machine
#     DEVICE=cpu ITERS=40 LIMIT=60 bash benchmarks/task_recipes_gpu.sh               # the script, anywhere
#     TRIALS=benchmarks/task_recipes_gpu_seeds.txt ITERS=16000 LIMIT=290 bash benchmarks/task_recipes_gpu.sh  # seeds
out=${OUT:-benchmarks/raw/task_recipes_gpu}
device=${DEVICE:-cuda}
iters=${ITERS:-24000}         # each trial's schedule (max_iters); LIMIT may stop it first
limit=${LIMIT:-380}           # seconds of training per trial, all running at once
export PYTHONUNBUFFERED=1 TRIAL_THREADS=1
mkdir -p "$out"
log="$out/log.txt"
{ nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null || echo "no nvidia-smi ($device)"
  python3 -c "import torch; print('torch', torch.__version__)"; nproc; date -u +%FT%TZ; } | tee "$out/card.txt" >> "$log"
python3 -c "import tasks.trial as t; print(','.join(t.FIELDS))" > "$out/trials.csv"   # the header, before the writers
fix="--tie_embeddings=False --embed_std=1.0"
big="--n_layer=4 --n_embd=128 --learning_rate=1e-3"
trials=(
  "addition none --seed=1337"
  "addition learned --seed=1337"
  "addition learned --seed=1338"
  "addition sinusoidal --seed=1337"
  "addition t5 --seed=1337"
  "addition alibi --seed=1337"
  "parity rope $big $fix"
  "parity rope $big $fix --curriculum_iters=$((iters / 2))"
  "parity learned $big $fix"
  "parity learned $big $fix --curriculum_iters=$((iters / 2))"
  "parity rope --n_layer=4 --n_embd=128 --learning_rate=3e-4 $fix"
  "parity rope $big"
)
[ -n "$TRIALS" ] && mapfile -t trials < "$TRIALS"   # a file of trials, one a line, instead of the list above
for t in "${trials[@]}"; do
  # shellcheck disable=SC2086  # each trial's words are its arguments
  python3 -m tasks.trial $t --max_iters=$iters --device=$device --time_limit=$limit --trials="$out/trials.csv" \
      >> "$log" 2>&1 &
done
wait
echo "done $(date -u +%T)" >> "$log"
cat "$out/trials.csv"
