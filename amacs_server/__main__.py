"""Start the server: ``python -m amacs_server [--headless] [--home DIR]``.

Emacs starts it with ``AMACS_TOKEN`` in the environment and reads the port
from the first line of stdout.  Nothing else is ever printed before the port
(EPC defect 5): stderr goes to ``logs/server.log`` in the AMACS home.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import secrets
import sys
from pathlib import Path

from .config import ConfigError, load_config


def _redirect_stderr(log_file: Path) -> None:
    fd = os.open(log_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(fd, 2)
    os.close(fd)
    sys.stderr = open(2, "w", buffering=1, encoding="utf-8", closefd=False)  # noqa: SIM115


def _fail(message: str) -> int:
    """Emacs shows a non-numeric first line as the reason the server did not start."""
    print(f"AMACS server error: {message}", flush=True)
    return 1


def main(argv: list[str] | None = None) -> int:
    """Run the server until Emacs goes away (or forever, headless); or summarize transcripts."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["transcripts"]:
        from .transcripts import main as transcripts_main

        return transcripts_main(argv[1:])
    parser = argparse.ArgumentParser(prog="amacs-server", description=__doc__)
    parser.add_argument("--headless", action="store_true", help="serve any Emacs holding the token; stay up")
    parser.add_argument("--home", help="the AMACS home (default: $AMACS_HOME or ~/.agent)")
    args = parser.parse_args(argv)
    env = dict(os.environ)
    if args.home:
        env["AMACS_HOME"] = args.home
    try:
        config = load_config(env)
        (config.home / "logs").mkdir(parents=True, exist_ok=True)
    except (ConfigError, OSError) as err:
        return _fail(str(err))
    _redirect_stderr(config.home / "logs" / "server.log")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    token = config.token
    if token is None:
        if not args.headless:
            return _fail("AMACS_TOKEN is not set: start the server from Emacs (M-x amacs-shell)")
        token = secrets.token_hex(32)

    from .methods import publish  # imported late: the port line comes first in the common case
    from .runtime import Runtime
    from .transport.emacs_face import EmacsFace
    from .transport.server import AmacsEPCServer

    server = AmacsEPCServer(token, headless=args.headless)
    face = EmacsFace(server)
    try:
        rt = Runtime(config, face)
    except Exception as err:  # noqa: BLE001 - reported to Emacs in one line
        logging.exception("start-up failed")
        return _fail(f"cannot open the AMACS home {config.home}: {err}")
    face.eval_timeout = rt.settings.eval_timeout
    publish(server, rt, face)
    rt.start()
    port = server.server_address[1]
    info = {"port": port, "pid": os.getpid()}
    if args.headless and config.token is None:
        info["token"] = token
    info_path = config.home / "server.json"
    fd = os.open(info_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump(info, fh)
    print(port, flush=True)
    logging.info("serving on 127.0.0.1:%s (headless=%s, home=%s)", port, args.headless, config.home)
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        rt.stop()
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
