"""Run as ``python -m tests.training.tpu_connect_check TPU``: connects to the TPU
named TPU with a 3 s timeout; on the ValueError, prints ``SECONDS ERROR`` (the
time it took, the message) and exits 1 (see test_tpu_paths.py)."""

import sys
import time

from packed_bert_tf.training.distribution import connect_to_tpu


def main(tpu: str) -> None:
    started = time.monotonic()
    try:
        connect_to_tpu(tpu, timeout=3)
    except ValueError as error:
        print(f"{time.monotonic() - started:.1f} {error}")
        sys.exit(1)


if __name__ == "__main__":
    main(sys.argv[1])
