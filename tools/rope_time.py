"""Put a RoPE run's seconds beside an encoding's: every (encoding, length) cell of the encoding's bench.py JSON gets
rope_s, the seconds of the RoPE JSON at that length (the RoPE run just before it, in a process of its own), the
time tools/docs.py's long tables divide by. The encoding's file is rewritten in place.

    python -m tools.rope_time ROPE_JSON ENCODING_JSON
"""
import json
import sys


def add_rope_time(rope, run):
    """run (a bench.py --sections=long JSON) with rope_s in each cell, from rope's cells at the same length."""
    rope_cells = rope["long"]["rope"]
    for by_length in run["long"].values():
        for length, cell in by_length.items():
            if length not in rope_cells:
                raise SystemExit(f"the RoPE JSON has no {length}-token run; run RoPE at --long_lengths={length} first")
            cell["rope_s"] = rope_cells[length]["s"]
    return run


def main(argv):
    if len(argv) != 2:
        raise SystemExit("usage: python -m tools.rope_time ROPE_JSON ENCODING_JSON (both bench.py --sections=long)")
    rope_path, run_path = argv
    with open(rope_path) as f:
        rope = json.load(f)
    with open(run_path) as f:
        run = json.load(f)
    with open(run_path, "w") as f:
        json.dump(add_rope_time(rope, run), f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1:])
