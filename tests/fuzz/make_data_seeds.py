#!/usr/bin/env python3
"""Writes the seed corpora of the data/ fuzz targets (record_shard_header, token_file_header,
loader_state) into tests/fuzz/corpus/<target>/. Deterministic; rerun after a format change:

    python3 tests/fuzz/make_data_seeds.py
"""
import os
import struct

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def crc32c(data, crc=0):
    crc ^= 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def shard_header(dtype, shape, record_size, count, payload_crc):
    h = bytearray(128)
    h[0:8] = b"MFRECSHD"
    struct.pack_into("<IIII", h, 8, 2, dtype, len(shape), 0)
    struct.pack_into("<QQ", h, 24, record_size, count)
    for i, d in enumerate(shape):
        struct.pack_into("<q", h, 40 + 8 * i, d)
    struct.pack_into("<I", h, 104, payload_crc)
    struct.pack_into("<I", h, 124, crc32c(bytes(h[:124])))
    return bytes(h)


def token_file(tokens, width, vocab, count=None):
    fmt = "<H" if width == 2 else "<I"
    payload = b"".join(struct.pack(fmt, t) for t in tokens)
    h = bytearray(64)
    h[0:8] = b"MFTOKENS"
    struct.pack_into("<IIQQI", h, 8, 1, width, len(tokens) if count is None else count, vocab, crc32c(payload))
    struct.pack_into("<I", h, 60, crc32c(bytes(h[:60])))
    return bytes(h) + payload


def manifest(lines):
    text = "".join(line + "\n" for line in lines)
    return (text + "manifest_crc32c=0x%08x\n" % crc32c(text.encode())).encode()


def write(target, name, data):
    d = os.path.join(ROOT, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def main():
    # record_shard_header: '0' raw file, '1' CRC-fixed header + payload, '2' manifest text.
    payload = struct.pack("<6i", 0, 1, 2, 3, 4, 5)  # 3 records of i32[2]
    good = shard_header(3, [2], 8, 3, crc32c(payload)) + payload
    write("record_shard_header", "seed_raw_valid", b"0" + good)
    write("record_shard_header", "seed_raw_bad_crc", b"0" + good[:124] + b"\0\0\0\0" + payload)
    write("record_shard_header", "seed_fixed_valid", b"1" + good[:124] + payload)
    write("record_shard_header", "seed_fixed_truncated", b"1" + good[:124] + payload[:5])
    # Issue #17: shape entries whose product overflows int64 (signed-overflow UB before the fix).
    big = shard_header(1, [1 << 40, 1 << 40, 1 << 40, 1 << 40], 0, 1, 0)
    write("record_shard_header", "seed_fixed_overflowing_shape", b"1" + big[:124])
    huge = shard_header(4, [1 << 37], 1 << 40, 1 << 48, 0)
    write("record_shard_header", "seed_fixed_huge_count", b"1" + huge[:124])
    write("record_shard_header", "seed_fixed_zero_dim", b"1" + shard_header(0, [0, 1 << 40], 0, 5, 0)[:124])
    m = manifest(["meshflow.data.RecordShardManifest v1",
                  "dtype=i32 shape=[2] record_size=8 num_shards=2 num_records=5",
                  "shard name=a.mfrec records=3 bytes=152 crc32c=0x01234567",
                  "shard name=b.mfrec records=2 bytes=144 crc32c=0x89abcdef"])
    write("record_shard_header", "seed_manifest_valid", b"2" + m)
    write("record_shard_header", "seed_manifest_truncated", b"2" + m[: len(m) // 2])
    bad = manifest(["meshflow.data.RecordShardManifest v1",
                    "dtype=i32 shape=[2] record_size=8 num_shards=2 num_records=5",
                    "shard name=../a.mfrec records=3 bytes=152 crc32c=0x01234567",
                    "shard name=../a.mfrec records=99999999999999999999 bytes=144 crc32c=0x89abcdef"])
    write("record_shard_header", "seed_manifest_bad_entries", b"2" + bad)

    # token_file_header: flags, seq_len - 1, file.
    tokens = list(range(40))
    write("token_file_header", "seed_valid_u16", bytes([0b00010, 7]) + token_file(tokens, 2, 64))
    write("token_file_header", "seed_valid_u32_i64", bytes([0b00011, 3]) + token_file(tokens, 4, 1000))
    write("token_file_header", "seed_truncated_half", bytes([0b00010, 7]) + token_file(tokens, 2, 64)[: 64 + 40])
    write("token_file_header", "seed_vocab_too_small", bytes([0b00000, 7]) + token_file(tokens, 2, 10))
    write("token_file_header", "seed_raw_u16", bytes([0b00100, 7]) + struct.pack("<40H", *tokens))
    write("token_file_header", "seed_raw_no_width", bytes([0b00000, 7]) + struct.pack("<40H", *tokens))
    write("token_file_header", "seed_fixed_huge_count",
          bytes([0b10010, 7]) + token_file(tokens, 2, 64, count=(1 << 60))[:60])
    write("token_file_header", "seed_fixed_big_token_i32",
          bytes([0b10000, 1]) + token_file([0xF0000000, 1, 2, 3], 4, 1 << 32))

    # loader_state: text.
    for name, text in [
        ("seed_v1", "meshflow.data.LoaderState v1 seed=42 epoch=3 consumed=12 num_samples=40"),
        ("seed_v2_config", "meshflow.data.LoaderState v2 seed=42 epoch=0 consumed=6 num_samples=40 batch_size=6 "
                           "shuffle=1 drop_last=0"),
        ("seed_v2_other_batch", "meshflow.data.LoaderState v2 seed=42 epoch=1 consumed=38 num_samples=40 "
                                "batch_size=19"),
        ("seed_v2_fingerprint", "meshflow.data.LoaderState v2 seed=42 epoch=0 consumed=0 num_samples=40 "
                                "dataset=00c0ffee12345678"),
        ("seed_other_shuffle", "meshflow.data.LoaderState v2 seed=42 epoch=0 consumed=0 num_samples=40 shuffle=0"),
        ("seed_end_of_epoch", "meshflow.data.LoaderState v2 seed=42 epoch=9223372036854775807 consumed=40 "
                              "num_samples=40"),
        ("seed_bad_values", "meshflow.data.LoaderState v2 seed=42 epoch=-1 consumed=0 num_samples=40 shuffle=2"),
        ("seed_v3", "meshflow.data.LoaderState v3 seed=1 epoch=0 consumed=0 num_samples=40"),
    ]:
        write("loader_state", name, text)


if __name__ == "__main__":
    main()
