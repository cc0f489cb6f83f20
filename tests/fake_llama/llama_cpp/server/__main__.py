"""A stand-in for ``python -m llama_cpp.server`` (tests/test_local_model.py): real HTTP on the port
it is given, ``/v1/models`` only; a model file named ``fail`` makes it exit 1 at once."""

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

    def log_message(self, *args: object) -> None:
        pass


http.server.HTTPServer((args.host, args.port), Handler).serve_forever()
