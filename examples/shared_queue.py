"""One host's side of a queue shared over a network filesystem (NFS, sshfs, CephFS...).

    python examples/shared_queue.py [DIRECTORY] [--host NAME]

Run it on every host with the same shared DIRECTORY (without one it uses a temporary
directory, to try it on one machine). It says how this host will wait for messages,
publishes ten messages, each with a dedup id so that a retry after an error can never
publish it twice, then consumes whatever is ready, from any host, and deletes it.
"""

from __future__ import annotations

import argparse
import shutil
import socket
import tempfile
import time

import vsqs


def publish_safely(queue: vsqs.Queue, body: bytes, key: str) -> str:
    """Publish with retries: the dedup id makes a retry of a publish that did go through
    return that message's id instead of publishing it again."""
    for attempt in range(5):
        try:
            return queue.publish(body, dedup_id=key)
        except OSError:  # a network hiccup: retry, safely, with the same dedup id
            time.sleep(0.1 * 2**attempt)
    return queue.publish(body, dedup_id=key)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("directory", nargs="?")
    parser.add_argument("--host", default=socket.gethostname())
    args = parser.parse_args()
    scratch = None if args.directory else tempfile.mkdtemp()
    try:
        # A visibility timeout far above the worst clock skew plus the longest pause of a
        # consumer; a dedup window far above the skew; polling at 0.2 s on a shared mount.
        queue = vsqs.Queue(
            args.directory or f"{scratch}/jobs",
            visibility_timeout=300,
            dedup_window=600,
            poll_interval=0.2,
        )
        waiter = type(queue.waiter()).__name__
        print(f"{args.host}: waiting by {'polling' if waiter == 'PollWaiter' else 'inotify'}")
        run = time.time_ns()
        for n in range(10):
            publish_safely(queue, f"{args.host} job {n}".encode(), f"{args.host}-{run}-{n}")
        done = 0
        while (message := queue.receive(timeout=1)) is not None:
            done += 1  # the work would go here; delete only once it is done
            queue.delete(message)
        print(f"{args.host}: consumed {done} messages")
    finally:
        if scratch is not None:
            shutil.rmtree(scratch)


if __name__ == "__main__":
    main()
