"""Read the history rows of an offline wandb run file (run-*.wandb), for tests.

The file is a 7-byte wandb header followed by LevelDB-log framed records (32 KiB blocks;
each chunk: crc32 (4), length (2, little-endian), type (1: full, 2: first, 3: middle,
4: last)), each record a `Record` protobuf from wandb.proto.
"""
import json
import struct

from wandb.proto import wandb_internal_pb2 as pb

BLOCK = 32768


def records(path):
    data = open(path, "rb").read()
    assert data[:4] == b":W&B", "not a wandb run file"
    pos, parts = 7, []
    while pos + 7 <= len(data):
        left = BLOCK - pos % BLOCK
        if left < 7:  # trailer padding
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        chunk = data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind == 0:
            continue
        parts.append(chunk)
        if kind in (1, 4):
            rec = pb.Record()
            rec.ParseFromString(b"".join(parts))
            parts = []
            yield rec


def history(path):
    """List of {key: value} dicts, one per logged step."""
    rows = []
    for rec in records(path):
        if rec.WhichOneof("record_type") == "history":
            rows.append({(i.key or "/".join(i.nested_key)): json.loads(i.value_json) for i in rec.history.item})
    return rows
