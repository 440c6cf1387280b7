"""Export a trained model to Hugging Face transformers or a safetensors release, or import one.

    python export.py out-rope --to=hf --out=hf-rope              # a transformers folder: GPT-NeoX/Llama (rope), GPT-2
    python export.py out-rope --to=safetensors                   # out-rope/model.safetensors + config.json
    python export.py --from=hf hf-pythia --out=out-imported      # a local GPT-2/GPT-NeoX/Llama folder -> ckpt.pt
    python export.py --from=safetensors out-rope --out=out-copy  # a release folder back into a checkpoint

The conversion is interop/hf.py (which encodings map onto which architecture, and how);
docs/interop.md has the table and the measured logits parity. An encoding with no
transformers counterpart gets one line saying so, and the safetensors release form in
--out instead (exit 2). Imports never touch the hub: a local folder only. An imported
checkpoint works with sample.py and evaluate.py (give evaluate --data_dir: the folder of
its val.bin), and train.py --init_from=resume fine-tunes it from a fresh AdamW state (give
the model keys and settings it was imported with, as for any resume).
"""
import dataclasses
import math
import os
import sys

from interop.hf import InteropError, read_folder, to_hf, to_posgpt
from interop.release import FORMAT, read_release, read_tokenizer, write_folder, write_release, write_tokenizer
from training import checkpoint
from training.cli import fail, parse
from training.config import Config, ConfigError, model_config

OPTIONS = {"to": "", "from": "", "out": ""}


def export(src, to, out):
    ckpt = checkpoint.load(src)
    args, state, tok = ckpt["model_args"], ckpt["model"], ckpt.get("tokenizer")
    if to == "safetensors":
        write_release(args, state, tok, out or src)
        return f"wrote {os.path.join(out or src, 'model.safetensors')} and config.json"
    if not out:
        raise ConfigError("--to=hf needs --out=FOLDER for the transformers model")
    try:
        config, tensors = to_hf(args, state)
    except InteropError as e:
        write_release(args, state, tok, out)
        raise ConfigError(f"{e}; wrote the safetensors release form to {out} instead (model.safetensors + "
                          f"config.json)") from None
    write_folder(out, config, tensors, "pt")
    note = write_tokenizer(tok, out)
    if note:
        print(note, file=sys.stderr)
    return f"wrote {config['architectures'][0]} to {out}"


def import_folder(path, out):
    """A transformers or release folder into out/ckpt.pt."""
    if not out:
        raise ConfigError("--from needs --out=FOLDER for the posgpt checkpoint")
    if os.path.exists(checkpoint.path_in(out)):
        raise ConfigError(f"{checkpoint.path_in(out)} already exists; choose another --out")
    if not os.path.isdir(path):
        raise ConfigError(f"{path} is not a folder; give a local transformers folder (config.json + weights)")
    config, tensors = read_folder(path)
    if config.get("format") == FORMAT:
        args, state, tok = read_release(config, tensors)
    else:
        args, state, note = to_posgpt(config, tensors, path)
        if note:
            print(note, file=sys.stderr)
        tok = read_tokenizer(path, config)
    model = checkpoint.build_model({"model_args": args, "model": state})  # the weights fit the config, or one line
    cfg = Config(**dataclasses.asdict(model_config(args)), dataset="", out_dir=out)
    fresh = model.configure_optimizers(cfg.weight_decay, cfg.learning_rate, (cfg.beta1, cfg.beta2), "cpu")
    ckpt = {"model": state, "model_args": args, "config": dataclasses.asdict(cfg), "iter_num": 0,
            "best_val_loss": math.inf, "optimizer": fresh.state_dict(),   # so train.py --init_from=resume fine-tunes
            "imported_from": os.path.abspath(path)}
    if tok is not None:
        ckpt["tokenizer"] = tok
    checkpoint.save(ckpt, checkpoint.path_in(out))
    return f"wrote {checkpoint.path_in(out)} ({args['pos_encoding']}, {args['n_layer']} layers)" + (
        "" if tok else "; no tokenizer found: sample.py needs one, evaluate.py does not")


def main(argv):
    try:
        opts, _, words = parse(argv, OPTIONS, positionals=True, doc=__doc__)
        if bool(opts["to"]) == bool(opts["from"]) or len(words) != 1:
            raise ConfigError("usage: export.py OUT_DIR --to=hf|safetensors [--out=DIR], or "
                              "export.py --from=hf|safetensors FOLDER --out=DIR")
        for key in ("to", "from"):
            if opts[key] not in ("", "hf", "safetensors"):
                raise ConfigError(f"--{key} must be hf or safetensors, got {opts[key]!r}")
        done = (export(words[0], opts["to"], opts["out"]) if opts["to"] else import_folder(words[0], opts["out"]))
    except (ValueError, OSError) as e:
        fail(str(e))
    print(done)


if __name__ == "__main__":
    main(sys.argv[1:])
