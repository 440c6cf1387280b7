"""Datasets for posgpt: corpus download, prepare scripts, tokenizers and the batch loader.

On disk every dataset uses nanoGPT's format: data_dir/<name>/{train,val}.bin (uint16 token ids)
plus an optional meta.pkl describing the tokenizer.
"""
