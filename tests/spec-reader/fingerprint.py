#!/usr/bin/env python3
"""The source fingerprint of a directory outside Git, from SPEC §11 alone.

    python3 tests/spec-reader/fingerprint.py DIR

Every file beneath DIR is an entry (outside Git no ignore rule applies); prints the
digest `tacho fingerprint .` prints when run in DIR. Standard library plus `blake3`.
"""

import os
import struct
import sys

try:
    import blake3
except ImportError:
    sys.exit("this reader needs the blake3 package: pip install blake3")


def main():
    root = sys.argv[1]
    entries = []
    for base, _dirs, files in os.walk(root):
        for f in files:
            full = os.path.join(base, f)
            rel = os.path.relpath(full, root).replace(os.sep, "/").encode("utf-8")
            with open(full, "rb") as fh:
                data = fh.read()
            executable = os.stat(full).st_mode & 0o111 != 0
            entries.append((rel, data, executable))
    entries.sort()
    h = blake3.blake3(derive_key_context="tacho source fingerprint v1")
    for path, data, executable in entries:
        h.update(struct.pack("<I", len(path)) + path)
        h.update(bytes([1, 1 if executable else 0]))
        h.update(struct.pack("<Q", len(data)) + blake3.blake3(data).digest())
    print(h.hexdigest())


main()
