"""A stand-in for ``python -m llama_cpp.server`` (tests/test_local_model.py): real HTTP on the port
it is given, ``/v1/models`` only, each request a line on its stderr; a model file named ``fail``
makes it exit 1 at once."""

import argparse
import http.server
import json
import sys

parser = argparse.ArgumentParser()
parser.add_argument("--model")
parser.add_argument("--model_alias")
parser.add_argument("--host")
parser.add_argument("--port", type=int)
parser.add_argument("--n_ctx")
args = parser.parse_args()
if args.model.endswith("fail"):
    sys.exit(1)


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = json.dumps({"object": "list", "data": [{"id": args.model_alias, "object": "model"}]}).encode()
        self.send_response(200 if self.path == "/v1/models" else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - stdlib name
        # Each request is a line on stderr (the log the AMACS server gives it), as llama.cpp's says.
        sys.stderr.write(f"INFO: {self.client_address[0]} - {format % args}\n")
        sys.stderr.flush()


http.server.HTTPServer((args.host, args.port), Handler).serve_forever()
