"""``python -m adaptis_client``: the REST API from a shell, printing JSON.

    export ADAPTIS_URL=https://studio.example.com
    python -m adaptis_client --token-file ~/.adaptis-token endpoints
    python -m adaptis_client --token-file ~/.adaptis-token post /api/jobs/ @job.json
    python -m adaptis_client --token-file ~/.adaptis-token wait /api/jobs/12/
    python -m adaptis_client --token-file ~/.adaptis-token get /api/plans/ job=12

The token comes from ``--token-file`` or the ``ADAPTIS_TOKEN`` environment variable (never from the command
line, where other users of the host could read it). A refusal prints the API's answer and exits with 1.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from adaptis_client import ApiError, Client


def _body(text: str) -> dict:
    return json.loads(Path(text[1:]).read_text() if text.startswith("@") else text)


def _params(pairs: list[str]) -> dict:
    bad = [pair for pair in pairs if "=" not in pair]
    if bad:
        raise SystemExit(f"query parameters are NAME=VALUE; got {bad[0]!r}")
    return dict(pair.split("=", 1) for pair in pairs)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m adaptis_client", description=__doc__.split("\n")[0])
    parser.add_argument("--url", default=os.environ.get("ADAPTIS_URL"),
                        help="the product's address (default: $ADAPTIS_URL)")
    parser.add_argument("--token-file", type=Path, help="a file holding an API token (default: $ADAPTIS_TOKEN)")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("endpoints", help="list the API's endpoints")
    get = commands.add_parser("get", help="GET a path, with NAME=VALUE query parameters")
    get.add_argument("path")
    get.add_argument("params", nargs="*")
    post = commands.add_parser("post", help="POST a JSON body (text, or @FILE) to a path")
    post.add_argument("path")
    post.add_argument("body", nargs="?", default="{}")
    wait = commands.add_parser("wait", help="GET a job, run or profile until it has finished")
    wait.add_argument("path")
    wait.add_argument("--timeout", type=float, default=1800, help="seconds (default 1800)")
    args = parser.parse_args(argv)
    if not args.url:
        parser.error("give --url or set ADAPTIS_URL")
    token = args.token_file.read_text().strip() if args.token_file else os.environ.get("ADAPTIS_TOKEN")
    if not token:
        parser.error("give --token-file or set ADAPTIS_TOKEN")
    client = Client(args.url, token=token)
    try:
        if args.command == "endpoints":
            answer = client.endpoints()
        elif args.command == "get":
            answer = client.get(args.path, **_params(args.params))
        elif args.command == "post":
            answer = client.post(args.path, _body(args.body))
        else:
            answer = client.wait(args.path, timeout_s=args.timeout)
    except ApiError as error:
        print(error, file=sys.stderr)
        return 1
    print(json.dumps(answer, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
