#!/usr/bin/env python3
"""Example custom tool in Python: the seed's repo_stats.

Arguments arrive as one JSON object on stdin; each stdout line that is a JSON object with
"update", "result" or "error" is protocol (see proto-docs/custom-tools.md). The working
directory is the session's workspace."""
import json
import subprocess
import sys


def send(obj):
    print(json.dumps(obj), flush=True)


args = json.load(sys.stdin)
glob = args.get("glob") or "*"
send({"update": {"content": [{"type": "text", "text": "Scanning files..."}],
                 "details": {"phase": "scan"},
                 "progress": {"progress": 0, "total": 1, "message": "git ls-files"}}})
proc = subprocess.run(["git", "ls-files", "--", glob], capture_output=True, text=True)
if proc.returncode != 0:
    send({"error": proc.stderr.strip() or "git ls-files failed"})
    sys.exit(0)
files = [f for f in proc.stdout.splitlines() if f]
send({"result": {
    "content": [{"type": "text", "text": "Found %d files" % len(files)}],
    "structured": {"count": len(files), "sample": files[:10]},
}})
