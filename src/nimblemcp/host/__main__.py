"""`python -m nimblemcp.host tools|call|listen --config mcp.json ...` (see `_cli`)."""

import sys

from nimblemcp.host._cli import main

if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
