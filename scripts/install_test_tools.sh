#!/usr/bin/env bash
# Install the third-party CLIs the test suite drives (tests/tools/package.json, pinned exactly by its
# lock file) into tests/tools/node_modules (gitignored). The test session runs this itself when the
# tools are missing or stale; it is idempotent. Needs Node.js and npm on PATH.
set -euo pipefail
cd "$(dirname "$0")/../tests/tools"

stamp=node_modules/.installed-lock.sha256
want="$(sha256sum package-lock.json | cut -d' ' -f1)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    npm ci --no-audit --no-fund --loglevel=error
    printf '%s\n' "$want" > "$stamp"
fi
