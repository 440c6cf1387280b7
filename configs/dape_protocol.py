# DAPE's length-extrapolation protocol (Zheng et al. 2024, arXiv:2405.14722, Section 4: train at 128 tokens, evaluate
# at 128 to 8,192, 64x): `python compare.py configs/dape_protocol.py`. DAPE-Kerple (the paper's main setting) and
# DAPE-ALiBi against the baselines of its figures that this repo has (NoPE, RoPE, T5's bias, ALiBi, Kerple, FIRE),
# on configs/base.py's recipe (4 x 4 x 128, 3,000 iterations of 32 x 128 tokens), one seed, evaluated as trained
# (no RoPE method, no fine-tune). One checkpoint on its own, the same lengths (evaluation.evaluate_checkpoint):
#   python evaluate.py out-dape-protocol/dape-s1337 --lengths=128,256,512,1024,2048,4096,8192
# At tiny size (it shows the protocol runs, no result; 6 min 0 s for both runs, most of it DAPE's training and its
# evaluation at 8,192, on this repo's busy 2-core AMD EPYC):
#   python compare.py configs/dape_protocol.py --only=dape,kerple --n_layer=1 --n_embd=32 --max_iters=4 \
#       --eval_interval=4 --eval_iters=1 --eval_tokens=8192 --plots=False --out_root=/tmp/dape-protocol \
#       --report_dir=/tmp/dape-protocol/report
# At a tenth of the iterations (--max_iters=300 --lr_decay_iters=300 --warmup_iters=30; docs/results.md, "DAPE's
# protocol"): dape, kerple and rope in 24 min 50 s (training 9, 5 and 8 min), alibi in 6 min 41 s after, one run at
# a time with one thread, on the busy 2-core Intel Xeon (load average 6-9); 3,000 iterations did not fit a session.
from configs.base import *  # noqa: F401,F403  the shared training recipe (data, model shape, optimiser)

encodings = ["dape", "dape_alibi", "kerple", "alibi", "fire", "t5", "rope", "none"]
variants = {"dape_alibi": {"pos_encoding": "dape", "dape_prior": "alibi"}}   # DAPE over ALiBi's fixed prior
seeds = 1
out_root = "out-dape-protocol"
report_dir = "reports/dape-protocol"   # its kept runs and report (docs/results.md, "DAPE's protocol")
block_size = 128                    # the paper's shorter training length
eval_lengths = [128, 256, 512, 1024, 2048, 4096, 8192]   # 1x to 64x
eval_tokens = 8192                  # targets scored per (run, length): one window of 8,192 at the longest
jobs = 1
