"""The server command of an experiment's run: ask the fork server for a fresh server, stand in for it.

    python -S launch.py SOCKET [ARG...]

Run by path with ``-S`` (standard library only: it starts in ~10 ms).  It
connects to the fork server (:mod:`.forkserver`) listening on the Unix socket
SOCKET and hands it its standard input, output and error, its environment, its
folder and ARGs; the fork server forks a new server process, which prints its
port on this process's standard output, as ``python -m amacs_server`` does.
This process then waits for that server to exit and exits with its status, so
Emacs sees one process that lives as long as its server.  When this process
ends first (Emacs killed it), the server sees the socket close and stops.
"""

from __future__ import annotations

import json
import os
import socket
import struct
import sys


def main(argv: list[str]) -> int:
    """Hand this process's files and environment to the fork server at ARGV[0]; its server's exit status."""
    if not argv:
        print("AMACS server error: launch.py needs the fork server's socket", flush=True)
        return 2
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(argv[0])
    except OSError as err:
        print(f"AMACS server error: the experiment's fork server at {argv[0]} is gone ({err})", flush=True)
        return 1
    request = json.dumps({"argv": argv[1:], "env": dict(os.environ), "cwd": os.getcwd(),
                          "pid": os.getpid()}).encode()
    socket.send_fds(sock, [struct.pack("!I", len(request)) + request], [0, 1, 2])
    status = b""
    while len(status) < 4:
        chunk = sock.recv(4 - len(status))
        if not chunk:
            return 1  # the server died without saying (killed): as a killed process would
        status += chunk
    return int(struct.unpack("!i", status)[0])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
