"""Datasets for posgpt: corpus download, prepare scripts, tokenizers and the batch loader.

On disk every dataset uses nanoGPT's format: data_dir/<name>/{train,val}.bin (uint16 token ids,
uint32 past 65,536 ids) plus an optional meta.pkl describing the tokenizer and, when data/prepare.py
wrote it, the documents (docs/data.md).
"""
