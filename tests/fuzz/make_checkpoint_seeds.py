#!/usr/bin/env python3
"""Writes the hand-made seeds of tests/fuzz/corpus/checkpoint_metadata/ (run from anywhere).

Each seed is one mode byte (see checkpoint_metadata_fuzzer.cc: odd = reseal the body length and
the trailer CRC, even = feed as is) followed by a metadata file in the format of
checkpoint/FORMAT.md. The valid ones mirror what SaveCheckpoint writes; the others break one
check each.
"""
import os
import struct

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "checkpoint_metadata")


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


assert crc32c(b"123456789") == 0xE3069283

DSIZE = {0: 4, 1: 8, 2: 2, 3: 4, 4: 8}


def numel(shape):
    n = 1
    for s in shape:
        n *= s
    return n


def tensor(name, dtype, shape, chunks, layout=b"S(0) on mesh(2) shape", version=1, cblock=None):
    """chunks: list of (offset, shape, file, byte_offset, nblocks or None). Version 2 writes each
    chunk's checksum block size (cblock, default BLOCK) after its byte length."""
    out = struct.pack("<I", len(name)) + name + struct.pack("<BI", dtype, len(shape))
    out += b"".join(struct.pack("<q", s) for s in shape)
    out += struct.pack("<I", len(layout)) + layout + struct.pack("<Q", len(chunks))
    for off, shp, f, boff, nblocks in chunks:
        length = numel(shp) * DSIZE[dtype]
        out += b"".join(struct.pack("<q", o) for o in off) + b"".join(struct.pack("<q", s) for s in shp)
        block = BLOCK if cblock is None else cblock
        if nblocks is None:
            nblocks = (length + block - 1) // block if block > 0 else 0
        out += struct.pack("<IQQ", f, boff, length)
        if version >= 2:
            out += struct.pack("<Q", block)
        out += struct.pack("<I", nblocks)
        out += b"".join(struct.pack("<I", 0x1234567 + k) for k in range(nblocks))
    return out


BLOCK = 16


def metadata(file_sizes, tensors, extra=b"", block=None, version=1):
    body = struct.pack("<QI", block or BLOCK, len(file_sizes))
    body += b"".join(struct.pack("<Q", s) for s in file_sizes)
    body += struct.pack("<Q", len(extra)) + extra + struct.pack("<I", len(tensors)) + b"".join(tensors)
    head = b"MFCKPT\r\n" + struct.pack("<IIQ", version, 0, len(body))
    return head + body + struct.pack("<I", crc32c(head + body))


def main():
    os.makedirs(OUT, exist_ok=True)
    two_chunks = tensor(b"w", 0, [4, 3], [([0, 0], [2, 3], 0, 0, None), ([2, 0], [2, 3], 1, 0, None)])
    seeds = {
        "valid_two_files": b"\x00" + metadata([24, 24], [two_chunks]),
        "valid_resealed": b"\x01" + metadata([24, 24], [two_chunks], extra=b"loader-state"),
        "valid_scalar_and_empty": b"\x01" + metadata(
            [8], [tensor(b"s", 1, [], [([], [], 0, 0, None)]), tensor(b"e", 3, [0, 5], [])]),
        "valid_many_dtypes": b"\x01" + metadata(
            [64], [tensor(b"a", 2, [4], [([0], [4], 0, 0, None)]), tensor(b"b", 4, [2, 2], [([0, 0], [2, 2], 0, 8, None)]),
                   tensor(b"c", 3, [6], [([0], [3], 0, 40, None), ([3], [3], 0, 52, None)])]),
        "bad_magic": b"\x00" + b"NOTACKPT" + metadata([24, 24], [two_chunks])[8:],
        "bad_version": b"\x00" + metadata([24, 24], [two_chunks], version=3),
        "valid_v2_chunk_blocks": b"\x01" + metadata(
            [24, 24], [tensor(b"w", 0, [4, 3], [([0, 0], [2, 3], 0, 0, None), ([2, 0], [2, 3], 1, 0, None)],
                              version=2, cblock=8)], version=2),
        "bad_v2_chunk_block": b"\x01" + metadata(
            [24, 24], [tensor(b"w", 0, [4, 3], [([0, 0], [2, 3], 0, 0, None), ([2, 0], [2, 3], 1, 0, None)],
                              version=2, cblock=32)], version=2),
        "bad_crc": b"\x00" + metadata([24, 24], [two_chunks])[:-1] + b"\x00",
        "truncated": b"\x00" + metadata([24, 24], [two_chunks])[:40],
        "overlap": b"\x01" + metadata([48], [tensor(b"w", 0, [4, 3], [([0, 0], [3, 3], 0, 0, None),
                                                                      ([2, 0], [2, 3], 0, 36, None)])]),
        "gap": b"\x01" + metadata([24], [tensor(b"w", 0, [4, 3], [([0, 0], [2, 3], 0, 0, None)])]),
        "past_file_end": b"\x01" + metadata([24, 20], [two_chunks]),
        "bad_block_count": b"\x01" + metadata([48], [tensor(b"w", 0, [4, 3], [([0, 0], [4, 3], 0, 0, 1)])]),
        "duplicate_name": b"\x01" + metadata([24, 24], [two_chunks, two_chunks]),
        "bad_dtype": b"\x01" + metadata([24], [tensor(b"w", 0, [6], [([0], [6], 0, 0, None)])]).replace(
            b"w\x00\x01", b"w\x09\x01", 1),
        "huge_shape": b"\x01" + metadata([8], [tensor(b"h", 4, [1 << 40, 1 << 40], [([0, 0], [1, 1], 0, 0, None)])]),
        "zero_block": b"\x01" + metadata([24, 24], [two_chunks], block=0),
    }
    for name, data in seeds.items():
        with open(os.path.join(OUT, "seed_" + name), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main()
