#!/usr/bin/python3
"""Bad safetensors files made from a good one (avtrain-export's), one per way a file can be wrong,
for the tests that model.init_from refuses each in one line naming the file and the tensor:

  truncated          the last 100 bytes cut off
  header_past_end    a header length beyond the end of the file
  overlap            a tensor's data_offsets moved 4 bytes back, into the tensor before it
  gap                a tensor's data_offsets moved 4 bytes on, leaving 4 bytes that no tensor holds
  unknown_dtype      blocks.0.attn.qkv.weight of dtype "F13"
  malformed_json     the header's last brace replaced by a space
  missing_tensor     a well-formed file without blocks.1.mlp.fc2.weight (the last stage's at pp 2)
  mis_shaped         a well-formed file whose blocks.0.attn.qkv.weight [3D, D] says [D, 3D]

    import make_bad_safetensors
    for name, content in make_bad_safetensors.bad_files("model.safetensors").items(): ...
usage: make_bad_safetensors.py GOOD.safetensors OUT_DIR    (writes OUT_DIR/NAME.safetensors)
"""
import json
import os
import struct
import sys


def read(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    return raw, json.loads(raw[8:8 + n]), raw[8 + n:]


def pack(header, data):
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data


def repacked(header, data, drop=(), reshape=None):
    """A well-formed file of the same tensors, `drop` left out, `reshape` {name: shape} applied."""
    out_header, out_data = {k: v for k, v in header.items() if k == "__metadata__"}, b""
    for name, t in sorted(((k, v) for k, v in header.items() if k != "__metadata__"),
                          key=lambda kv: kv[1]["data_offsets"][0]):
        if name in drop:
            continue
        begin, end = t["data_offsets"]
        out_header[name] = {"dtype": t["dtype"], "shape": (reshape or {}).get(name, t["shape"]),
                            "data_offsets": [len(out_data), len(out_data) + end - begin]}
        out_data += data[begin:end]
    return pack(out_header, out_data)


def middle_tensor(header):
    """A tensor with tensors before and after it in the data."""
    names = sorted((k for k in header if k != "__metadata__"), key=lambda k: header[k]["data_offsets"][0])
    return names[len(names) // 2]


def moved(header, data, by):
    h = json.loads(json.dumps(header))
    t = h[middle_tensor(header)]
    t["data_offsets"] = [t["data_offsets"][0] + by, t["data_offsets"][1] + by]
    return pack(h, data)


def bad_files(good):
    """NAME -> the bytes of that bad file, made from the file `good`."""
    raw, header, data = read(good)
    qkv = "blocks.0.attn.qkv.weight"
    with_dtype = json.loads(json.dumps(header))
    with_dtype[qkv]["dtype"] = "F13"
    text = pack(header, data)
    n = struct.unpack("<Q", text[:8])[0]
    brace = text[:8 + n].rstrip().rfind(b"}")
    return {
        "truncated": raw[:-100],
        "header_past_end": struct.pack("<Q", len(raw)) + raw[8:],
        "overlap": moved(header, data, -4),
        "gap": moved(header, data, +4),
        "unknown_dtype": pack(with_dtype, data),
        "malformed_json": text[:brace] + b" " + text[brace + 1:],
        "missing_tensor": repacked(header, data, drop={"blocks.1.mlp.fc2.weight"}),
        "mis_shaped": repacked(header, data, reshape={qkv: list(reversed(header[qkv]["shape"]))}),
    }


def write(good, out):
    """Writes each bad file as OUT/NAME.safetensors; returns NAME -> its path."""
    os.makedirs(out, exist_ok=True)
    paths = {}
    for name, content in bad_files(good).items():
        paths[name] = os.path.join(out, name + ".safetensors")
        with open(paths[name], "wb") as f:
            f.write(content)
    return paths


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    print(f"make_bad_safetensors: {len(write(sys.argv[1], sys.argv[2]))} files in {sys.argv[2]}")


if __name__ == "__main__":
    main()
