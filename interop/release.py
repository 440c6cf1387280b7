"""The safetensors release form of a checkpoint, and the tokenizer files transformers reads.

    out-rope/model.safetensors   the weights (float as trained; a tied lm_head stored once, as wte)
    out-rope/config.json         {"format": "posgpt", "model_args": {...}, "tokenizer": {...}}

No pickle anywhere: safetensors and JSON. A character vocabulary becomes a `tokenizers` file
(tokenizer.json: a BPE model with no merges over the characters, so each character is one
token, and a Fuse decoder) that transformers' AutoTokenizer reads; a tiktoken encoding has none
to write (one line says so).
"""
import json
import os

FORMAT = "posgpt"


def write_folder(folder, config, tensors, fmt):
    """model.safetensors (its metadata format: fmt) and config.json in `folder`."""
    from safetensors.torch import save_file
    os.makedirs(folder, exist_ok=True)
    save_file(tensors, os.path.join(folder, "model.safetensors"), metadata={"format": fmt})
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f, indent=2)


def write_release(model_args, state_dict, tokenizer, folder):
    """The release form of a posgpt model in `folder`; a char vocabulary by its stoi alone (itos is derived)."""
    tied = model_args.get("tie_embeddings", True)
    tensors = {k: v.contiguous() for k, v in state_dict.items() if k != "lm_head.weight" or not tied}
    if tokenizer and "stoi" in tokenizer:
        tokenizer = {"vocab_size": tokenizer["vocab_size"], "stoi": tokenizer["stoi"]}
    write_folder(folder, {"format": FORMAT, "model_args": model_args, "tokenizer": tokenizer}, tensors, FORMAT)


def char_tokenizer(vocab_size, stoi):
    """A character vocabulary's tokenizer entry from its JSON form (itos is derived)."""
    return {"vocab_size": vocab_size, "stoi": stoi, "itos": {i: c for c, i in stoi.items()}}


def read_release(config, tensors):
    """(model_args, state_dict, tokenizer entry) of a release folder's config.json and weights."""
    state = dict(tensors)
    state.setdefault("lm_head.weight", state["wte.weight"])   # tied: stored once
    tok = config.get("tokenizer")
    return config["model_args"], state, char_tokenizer(tok["vocab_size"], tok["stoi"]) if tok and "stoi" in tok else tok


def write_tokenizer(meta, folder):
    """tokenizer.json + tokenizer_config.json for a trained BPE (its own file) or a character vocabulary;
    else a line saying why not."""
    path = os.path.join(folder, "tokenizer.json")
    if meta and "tokenizer_json" in meta:   # data/prepare.py --tokenizer=bpe: transformers reads it as it is
        with open(path, "w") as f:
            f.write(meta["tokenizer_json"])
    elif meta and "stoi" in meta:
        from tokenizers import Tokenizer, decoders, models
        tok = Tokenizer(models.BPE(vocab=dict(meta["stoi"]), merges=[]))   # no merges: one token per character
        tok.decoder = decoders.Fuse()
        tok.save(path)
    elif meta and meta.get("encoding") == "gpt2" and "id_map" not in meta:
        return "note: no tokenizer.json written: the model uses GPT-2's BPE, which transformers' GPT-2 tokenizer has"
    else:
        return ("note: no tokenizer.json written: this tokenizer (tiktoken with a dataset id map, or none) "
                "has no transformers form")
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 1 << 30}, f, indent=2)


def read_tokenizer(folder, config):
    """A posgpt tokenizer entry for a transformers folder: its character or byte-level BPE tokenizer.json,
    GPT-2's BPE for a GPT-2 vocabulary; None when it has neither."""
    path = os.path.join(folder, "tokenizer.json")
    if os.path.isfile(path):
        with open(path) as f:
            text = f.read()
        tok = json.loads(text)
        vocab = tok["model"].get("vocab") or {}
        if tok["model"].get("type") == "BPE" and not tok["model"].get("merges") and all(len(c) == 1 for c in vocab):
            return char_tokenizer(len(vocab), vocab)
        if (tok.get("pre_tokenizer") or {}).get("type") == "ByteLevel":   # a byte-level BPE, as data/prepare.py trains
            eot = next((t["id"] for t in tok.get("added_tokens", []) if t["content"] == "<|endoftext|>"), None)
            return {"tokenizer": "bpe", "tokenizer_json": text, "vocab_size": config.get("vocab_size", len(vocab)),
                    "eot": eot}
    if config.get("model_type") == "gpt2" and config.get("vocab_size") == 50257:
        return {"tokenizer": "tiktoken", "encoding": "gpt2"}
    return None
