# Development tasks. `just` comes from the rust-just package in the dev extra.

python := justfile_directory() / ".venv/bin/python"

# List the recipes.
default:
    @{{just_executable()}} --list --justfile {{justfile()}}

# Regenerate the Pydantic models in generated/stormbuffer_models/ from schema/v1/.
gen:
    {{python}} scripts/gen_models.py

# Regenerate the man pages and shell completion scripts in src/stormbuffer/share/ from the click commands.
manuals:
    {{python}} scripts/gen_manuals.py

# Lint: ruff (style and errors) and mypy (types).
lint:
    {{python}} -m ruff check src tests bench scripts
    {{python}} -m ruff format --check src tests bench scripts
    {{python}} -m mypy

# Run the whole test suite.
test *args:
    {{python}} -m pytest {{args}}

# Everything CI checks: lint, then the tests.
check: lint test

# Render the protocol reference in docs/reference/ and the single-file schemas in schema/v1/bundled/
# from schema/v1/, then build the documentation site into site/ (warnings are errors).
docs:
    {{python}} scripts/render_schema_docs.py
    {{python}} scripts/bundle_schemas.py
    NO_MKDOCS_2_WARNING=1 {{python}} -m mkdocs build --strict

# Copy the review page's latest test screenshots (build/screenshots/) into docs/web/.
screenshots:
    for name in inbox inbox-update-diff search-results edit-conflict team-inbox-filtered team-record-history; do cp build/screenshots/$name.png docs/web/; done
    cp build/screenshots/test_a_hostile_record_renders_inert.png docs/web/hostile-record.png
    cp build/screenshots/test_narrow_screen_and_health.png docs/web/health-360px.png

# Every benchmark, saved to bench/results/*.json (long on a small machine: run one script to iterate).
bench:
    {{python}} bench/scale.py
    {{python}} bench/quality.py
    {{python}} bench/invoke_latency.py
    {{python}} bench/mcp_latency.py
    {{python}} bench/writes.py
    {{python}} bench/daemon.py
    {{python}} bench/http_api.py
    {{python}} bench/plugin_hook.py
    {{python}} bench/secret_guard.py
