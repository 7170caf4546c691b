#!/usr/bin/env python3
"""Seeds of torch_archive_fuzzer: small files torch.save writes (a state_dict,
a volshard-style checkpoint dict, a tensor with a strided view, shared
storages) and the bad inputs issue 26's probe found (each a zip whose data.pkl
crashed or exhausted an older reader), with small forms of issue 43 item 17's
costly ones (a zero-stride view, a storage shared by many keys, a string shared
through levels of lists, many zip names for one record). Run with the pinned environment:

    $(scripts/pyenv.sh --path)/bin/python tests/fuzz/make_archive_corpus.py
"""
import io
import os
import zipfile

import torch

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "archive_corpus")


def saved(obj):
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def archive(pickle_bytes, extra=()):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", pickle_bytes)
        for name, data in extra:
            z.writestr("archive/" + name, data)
    return buf.getvalue()


def main():
    os.makedirs(OUT, exist_ok=True)
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv3d(1, 2, 3), torch.nn.PReLU())
    base = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    seeds = {
        "state_dict.pt": saved(net.state_dict()),
        "checkpoint.pt": saved({"format": "volshard-checkpoint", "version": 1, "meta": '{"sampler": {}}',
                                "model": dict(net.state_dict()), "optimizer": torch.zeros(5, dtype=torch.uint8),
                                "checksum": "0"}),
        "views.pt": saved({"t": base.t(), "row": base[1], "same": base, "int": torch.arange(3),
                           "flag": torch.tensor([True, False]), "half": torch.ones(2, dtype=torch.float16)}),
        "empty_pops.pt": archive(b"\x80\x02R."),
        "appends_on_empty.pt": archive(b"\x80\x02e."),
        "setitem_on_empty.pt": archive(b"\x80\x02s."),
        "setitems_on_empty.pt": archive(b"\x80\x02(u."),
        "nested_tuple1.pt": archive(b"\x80\x02N" + b"\x85" * 1000 + b"."),
        "huge_string.pt": archive(b"\x80\x02\x8d\x00\x00\x00\x00\x00\x01\x00\x00"),
        "global_os_system.pt": archive(b"\x80\x02cos\nsystem\n(X\x02\x00\x00\x00idtR."),
        "storage_claims_more.pt": archive(
            b"\x80\x02ctorch._utils\n_rebuild_tensor_v2\n((X\x07\x00\x00\x00storagectorch\nFloatStorage\n"
            b"\x8c\x010\x8c\x03cpuJ\x00\xca\x9a;tQK\x00K\x02\x85K\x01\x85\x89}tR.", [("data/0", b"\x00" * 8)]),
    }
    # Issue 43 item 17, small: each would cost far more than its size in an older reader.
    seeds["zero_strides.pt"] = saved({"w": torch.zeros(6).as_strided((1000, 1000), (0, 0))})
    shared = torch.zeros(64)
    seeds["shared_storage.pt"] = saved({f"k{i}": shared for i in range(100)})
    string = b"X" + (4096).to_bytes(4, "little") + b"a" * 4096 + b"q\x00"
    for level in range(1, 4):
        string += b"](" + bytes([ord("h"), level - 1]) * 10 + b"eq" + bytes([level])
    seeds["shared_string.pt"] = archive(b"\x80\x02" + string + b".")
    aliased = io.BytesIO()
    with zipfile.ZipFile(aliased, "w", zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", b"\x80\x02N.")
        z.writestr("archive/data/0", b"x" * 4096)
    data = bytearray(aliased.getvalue())
    # A second directory entry for data/0, named data/1: the same local header.
    second = data.index(b"PK\x01\x02", data.index(b"PK\x01\x02") + 1)  # data/0's entry
    end = data.index(b"PK\x05\x06")
    renamed = bytes(data[second:end]).replace(b"archive/data/0", b"archive/data/1")
    eocd = bytearray(data[end:])
    eocd[8:10] = (int.from_bytes(eocd[8:10], "little") + 1).to_bytes(2, "little")
    eocd[10:12] = (int.from_bytes(eocd[10:12], "little") + 1).to_bytes(2, "little")
    eocd[12:16] = (int.from_bytes(eocd[12:16], "little") + len(renamed)).to_bytes(4, "little")
    seeds["aliased_records.pt"] = bytes(data[:end]) + renamed + bytes(eocd)
    for name, data in seeds.items():
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(data)
    print(f"wrote {len(seeds)} seeds to {OUT}")


if __name__ == "__main__":
    main()
