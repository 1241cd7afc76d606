"""What every interop script ends with: run the checks, print their one JSON summary on stdout
and exit 0, or print a one-line reason on stderr and exit 1."""
import asyncio
import json
import sys


def report(checks):
    """Runs the coroutine `checks`; the process's exit status."""
    try:
        summary = asyncio.run(checks)
    except Exception as e:  # a broken expectation, a transport or SDK error: all failures
        reason = " ".join(str(e).split())
        name = "" if type(e).__name__ == "Failed" else f"{type(e).__name__}: "
        print(f"FAIL: {name}{reason}", file=sys.stderr)
        return 1
    print(json.dumps(summary, sort_keys=True))
    return 0
