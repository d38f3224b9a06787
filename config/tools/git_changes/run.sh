#!/bin/sh
# Example custom tool in shell. The host runs it in the session's workspace with the
# arguments as JSON on stdin (none here) and reads JSON lines from stdout:
#   {"update": {...}}  a partial result, streamed to the caller at once;
#   {"result": {...}}  the answer;  {"error": "..."}  a failure.
# Any other output line is collected as plain text. See proto-docs/custom-tools.md.
set -u
cat >/dev/null # the arguments: this tool takes none

echo '{"update": {"content": [{"type": "text", "text": "running git status"}], "progress": {"progress": 0, "total": 1}}}'
if ! changes=$(git status --porcelain 2>&1); then
  # JSON-escape the message the crude way: only quotes and backslashes matter here.
  msg=$(printf '%s' "$changes" | head -n 1 | sed 's/\\/\\\\/g; s/"/\\"/g')
  printf '{"error": "git status failed: %s"}\n' "$msg"
  exit 0
fi
count=$(printf '%s' "$changes" | grep -c . || true)
text=$(printf '%s' "$changes" | sed 's/\\/\\\\/g; s/"/\\"/g' | awk '{printf "%s\\n", $0}')
printf '{"result": {"content": [{"type": "text", "text": "%s changed files\\n%s"}], "structured": {"count": %s}}}\n' "$count" "$text" "$count"
