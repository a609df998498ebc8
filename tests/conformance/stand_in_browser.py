"""A stand-in for the user's browser, for ``$BROWSER`` in ``prefixgate login`` under test.

``python stand_in_browser.py URL`` returns at once, as a real browser launcher does (so a login
command that waits for the launcher before it serves its loopback redirect URI is not stuck),
and a detached child GETs ``URL`` following redirects: the conformance suite's authorization
server approves at once and redirects to the login's loopback redirect URI, which completes
the flow. Standard library only; what happened goes to stderr.
"""

from __future__ import annotations

import subprocess
import sys
import urllib.error
import urllib.request

TIMEOUT = 30.0


def follow(url: str) -> int:
    """GET ``url``, following redirects; 0 when the last response was a success."""
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT) as response:  # noqa: S310 (the URL is the login's)
            print(f"stand-in browser: {response.status} at {response.geturl()}", file=sys.stderr)
            return 0
    except urllib.error.HTTPError as exc:
        print(f"stand-in browser: HTTP {exc.code} at {exc.geturl()}", file=sys.stderr)
    except (urllib.error.URLError, OSError) as exc:
        print(f"stand-in browser: {url} failed: {exc}", file=sys.stderr)
    return 1


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "--follow":
        return follow(argv[1])
    if len(argv) != 1:
        print("usage: stand_in_browser.py URL", file=sys.stderr)
        return 2
    subprocess.Popen([sys.executable, __file__, "--follow", argv[0]], start_new_session=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
