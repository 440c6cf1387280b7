# The headline on the code corpus (data/python_code: byte-level SymPy source, where far context should pay:
# names defined hundreds of bytes before their use), `python compare.py configs/compare_code.py`: the CPU
# headline's recipe (configs/compare_cpu.py: L = 256, 12.3M tokens a run, 3 seeds, rope_4L as the reference for
# gain past L, the RoPE methods and the fine-tune sweep on rope) for NoPE, RoPE, ALiBi and T5. Rows stream across
# files; the evaluation's chunks start at files' first bytes (prepared on first use: data/python_code/).
from configs.compare_cpu import *  # noqa: F401,F403

dataset = "python_code"
encodings = ["none", "rope", "alibi", "t5"]
out_root = "out-compare-code"
report_dir = "reports/compare-code"
