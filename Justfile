# Development tasks. `just` comes from the rust-just package in the dev extra.

python := justfile_directory() / ".venv/bin/python"

# List the recipes.
default:
    @{{just_executable()}} --list --justfile {{justfile()}}

# Regenerate the Pydantic models in generated/stormbuffer_models/ from schema/v1/.
gen:
    {{python}} scripts/gen_models.py
