#!/usr/bin/env python3
"""Instructions a file of opening a batch through the open-file cache (``plan.batch.open_all`` on
``SharedFiles``), in process: (a) first opens, (b) revalidations, (c) trusted files.

    valgrind --tool=callgrind --collect-atstart=no --toggle-collect=sys_call_tracing \\
        python scripts/open_instructions.py ROOT a|b|c

ROOT holds scripts/instructions.py's pool (``pool/DD/NNNNN.bin``, 10,000 files of 4 KiB, made
here if missing). 3,200 files of it, in batches of 64, are opened 4 times (first opens, bytes
kept, watched, trusted), then once more inside ``sys.call_tracing``: callgrind counts only that
pass (divide its total by 3,200). (a) measures the first pass; (b) ages every entry past its
window first, so that each open is a revalidation; (c) has a window that never ends.
"""

from __future__ import annotations

import os
import random
import sys
import time

from axon.plan.batch import open_all
from axon.storage.local import FileStore
from axon.storage.shared_files import SharedFiles

FILES, BATCH = 3200, 64


def main() -> None:
    root, mode = sys.argv[1], sys.argv[2]
    names = [f"pool/{i // 1000:02d}/{i:05d}.bin" for i in range(10_000)]
    if not os.path.exists(os.path.join(root, names[-1])):
        for name in names:
            os.makedirs(os.path.dirname(os.path.join(root, name)), exist_ok=True)
            with open(os.path.join(root, name), "wb") as f:
                f.write(os.urandom(4096))
        time.sleep(2.1)  # settled: small files' bytes are kept from their first use
    drawn = random.Random(1).sample(names, len(names))[:FILES]
    shared = SharedFiles(FileStore(root), size=20_000, valid=1e9 if mode == "c" else 5.0)

    def one_pass() -> None:
        for i in range(0, FILES, BATCH):
            for f in open_all(shared, drawn[i:i + BATCH]).values():
                f.close()

    if mode != "a":
        for _ in range(4):
            one_pass()
        if mode == "b":
            for entry in shared.cache._entries.values():  # noqa: SLF001 - a bench's own aging
                entry.checked -= 1e6
    sys.call_tracing(one_pass, ())
    shared.close()


if __name__ == "__main__":
    main()
