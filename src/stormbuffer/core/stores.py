"""Where stores live, what `store.toml` says, and how a store is initialized.

The global store lives under the platform data directory; a project store is the nearest
ancestor `.sbuf/` directory. Views select stores: `global` (default), `project` (project plus the
initialized global store) and `local` (project only, never the global store).

A store is private on disk (see `dirs`): `sbuf init` creates its directories 0700 and tightens
those of an existing store to it. The store directory and its `records/` and `locks/` must be real
directories: a symbolic link there is refused, so no write lands outside the store.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import re
import stat
import tempfile
import tomllib
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from .atomic import write_atomic
from .codec import toml_string
from .dirs import PlatformDirs, claim_private, is_private, make_private
from .errors import MutationBusy, NotInitialized, StoreError
from .ids import is_canonical_uuid, new_record_id
from .locks import LockBusy, exclusive_lock
from .scopes import GLOBAL, project_scope

STORE_FORMAT_VERSION = 1
DIRECTORY, POSTGRESQL = "directory", "postgresql"  # the record engines a store.toml can name
DATABASE_URL_ENV = "STORMBUFFER_DATABASE_URL"  # the variable `init --engine postgresql` names
EMBEDDED = "embedded"  # a PostgreSQL store on the user's embedded server: `database = "embedded"`, no URL
PRIVATE_GITIGNORE = "*\n!.gitignore\n"
SHARED_GITIGNORE = (
    "# Track only configuration, ignore rules, and canonical Markdown records.\n"
    "*\n!.gitignore\n!store.toml\n!records/\n!records/**/\n!records/**/*.md\n"
)


class View(StrEnum):
    GLOBAL = "global"
    PROJECT = "project"
    LOCAL = "local"

    @property
    def description(self) -> str:
        return {
            View.GLOBAL: "global",
            View.PROJECT: "project with applicable global memory",
            View.LOCAL: "strict local",
        }[self]


@dataclass(frozen=True)
class StorePaths:
    """The files of one store. `kind` is "global" or "project"."""

    kind: str
    root: Path
    cache_dir: Path  # shared by every store: models and the global projection

    @property
    def records(self) -> Path:
        return self.root / "records"

    @property
    def config_file(self) -> Path:
        return self.root / "store.toml"

    @property
    def gitignore(self) -> Path:
        return self.root / ".gitignore"

    @property
    def locks(self) -> Path:
        return self.root / "locks"

    @property
    def mutation_lock(self) -> Path:
        return self.locks / "mutation.lock"

    @property
    def journal(self) -> Path:
        return self.locks / "supersede.toml"

    @property
    def import_journal(self) -> Path:
        return self.locks / "import.toml"

    @property
    def models_dir(self) -> Path:
        return self.cache_dir / "models"

    @property
    def index_dir(self) -> Path:
        if self.kind == "project":
            return self.root
        return _writable_or_fallback(self.cache_dir, self.root)

    @property
    def index_name(self) -> str:
        return "index.sqlite3" if self.kind == "project" else "global.sqlite3"

    @property
    def index_path(self) -> Path:
        return self.index_dir / self.index_name

    @property
    def projection_lock(self) -> Path:
        return self.index_dir / "projection.lock"

    def is_initialized(self) -> bool:
        return self.config_file.is_file()


def _writable_or_fallback(cache_dir: Path, root: Path) -> Path:
    """The cache directory, or a private temp directory when the cache cannot be written."""
    try:
        make_private(cache_dir)
        probe = cache_dir / f".write-probe-{os.getpid()}"
        probe.touch()
        probe.unlink()
        return cache_dir
    except PermissionError:
        return claim_private(fallback_index_dir(root), "temporary projection directory", "XDG_CACHE_HOME")


def fallback_index_dir(root: Path) -> Path:
    """Where the global projection goes when the cache cannot be written (computed, not created).
    Its name can be guessed, so it is used only when it is this user's own private directory."""
    digest = hashlib.sha256(str(root).encode()).hexdigest()[:32]
    return Path(tempfile.gettempdir()) / f"stormbuffer-projection-{digest}"


def trusted_fallback_index_dir(root: Path) -> Path | None:
    """`fallback_index_dir` when it exists as this user's private directory (nothing is created)."""
    directory = fallback_index_dir(root)
    return directory if is_private(directory) else None


def find_project_root(cwd: Path) -> Path:
    """The nearest ancestor-or-self `.sbuf` directory, else `<cwd>/.sbuf`."""
    for directory in (cwd, *cwd.parents):
        candidate = directory / ".sbuf"
        if candidate.is_dir():
            return candidate
    return cwd / ".sbuf"


def resolve_store(view: View, cwd: Path, dirs: PlatformDirs) -> StorePaths:
    """The store a view selects; raises StoreError when its directories are symbolic links."""
    cache_dir = dirs.shared_cache
    if view is View.GLOBAL:
        paths = StorePaths("global", dirs.data / "stormbuffer", cache_dir)
    elif not cwd.is_dir():
        raise StoreError("the current working directory is not available")
    else:
        paths = StorePaths("project", find_project_root(cwd), cache_dir)
    refuse_links(paths)
    return paths


def refuse_links(paths: StorePaths) -> None:
    """Raise StoreError when the store directory, `records/` or `locks/` is a symbolic link (the
    directories above the store may be links)."""
    names = {paths.root: "store directory", paths.records: "records directory", paths.locks: "locks directory"}
    for directory, what in names.items():
        try:
            link = stat.S_ISLNK(directory.lstat().st_mode)
        except OSError:  # missing (not initialized yet) or unreadable: the operation reports it
            continue
        if link:
            raise StoreError(
                f"the {paths.kind} store's {what} is a symbolic link; Stormbuffer follows no link into or "
                "inside a store: replace it with a real directory"
            )


def global_store(dirs: PlatformDirs) -> StorePaths:
    return resolve_store(View.GLOBAL, Path("/"), dirs)


@dataclass(frozen=True)
class StoreConfig:
    scope: str  # "global" or "project"
    visibility: str  # "private" or "shared"
    project_id: str | None = None
    project_name: str | None = None
    engine: str = DIRECTORY  # where the records live: "directory" (records/) or "postgresql"
    database_url_env: str | None = None  # postgresql: the environment variable that holds the URL

    @property
    def database(self) -> str | None:
        """A PostgreSQL store's database: the variable holding its URL, or EMBEDDED; None for a directory store."""
        if self.engine != POSTGRESQL:
            return None
        return self.database_url_env or EMBEDDED

    @property
    def record_scope(self) -> str:
        return GLOBAL if self.project_id is None else project_scope(self.project_id)

    def render(self) -> str:
        lines = [
            f"format_version = {STORE_FORMAT_VERSION}",
            f"scope = {toml_string(self.scope)}",
            f"visibility = {toml_string(self.visibility)}",
        ]
        if self.project_id is not None and self.project_name is not None:
            lines += [
                f"project_id = {toml_string(self.project_id)}",
                f"project_name = {toml_string(self.project_name)}",
            ]
        if self.engine != DIRECTORY:  # a directory store's file stays the reference's
            lines.append(f"engine = {toml_string(self.engine)}")
            if self.database_url_env is None:
                lines.append(f"database = {toml_string(EMBEDDED)}")
            else:
                lines.append(f"database_url_env = {toml_string(self.database_url_env)}")
        return "\n".join(lines) + "\n"


_CONFIG_KEYS = (
    "format_version", "scope", "visibility", "project_id", "project_name", "engine", "database_url_env", "database"
)  # fmt: skip
_ENV_NAME = re.compile(r"[A-Z_][A-Z0-9_]{0,127}")


@functools.lru_cache(maxsize=16)
def parse_config(text: str, expected_scope: str) -> StoreConfig:
    """Parse `store.toml` strictly; raise StoreError naming the problem. The file is read on every
    use, and parsed once per text (a server's every read asks for the store's scope)."""
    try:
        table = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise StoreError(f"store.toml is invalid: {exc}") from None
    for key in table:
        if key not in _CONFIG_KEYS:
            raise StoreError(f"store.toml is invalid: unknown field `{key}`")
    if table.get("format_version") != STORE_FORMAT_VERSION or isinstance(table.get("format_version"), bool):
        raise StoreError("store.toml is invalid: format_version must be 1")
    scope = table.get("scope")
    if scope != expected_scope:
        raise StoreError(f"store.toml is invalid: scope is `{scope}`, expected `{expected_scope}`")
    visibility = table.get("visibility")
    if visibility not in ("private", "shared"):
        raise StoreError(f"store.toml is invalid: visibility must be `private` or `shared`, got `{visibility}`")
    engine, url_env = _parse_engine(table)
    project_id, project_name = table.get("project_id"), table.get("project_name")
    if scope == "global":
        if project_id is not None or project_name is not None:
            raise StoreError("store.toml is invalid: global stores must not contain project identity fields")
        return StoreConfig(scope, visibility, engine=engine, database_url_env=url_env)
    if not isinstance(project_id, str) or not is_canonical_uuid(project_id):
        raise StoreError("store.toml is invalid: project stores require a valid project_id")
    if not valid_project_name(project_name):
        raise StoreError(
            "store.toml is invalid: project stores require a non-empty project_name without control characters"
        )
    return StoreConfig(scope, visibility, project_id, project_name, engine, url_env)


def _parse_engine(table: dict[str, object]) -> tuple[str, str | None]:
    """The engine and its URL variable: absent (a directory store), or postgresql naming a variable or
    `database = "embedded"` (the variable None)."""
    engine, url_env, database = table.get("engine", DIRECTORY), table.get("database_url_env"), table.get("database")
    if engine == DIRECTORY:
        if url_env is not None or database is not None:
            raise StoreError("store.toml is invalid: a database belongs to a store with engine `postgresql`")
        return DIRECTORY, None
    if engine != POSTGRESQL:
        raise StoreError(f"store.toml is invalid: engine must be `{DIRECTORY}` or `{POSTGRESQL}`")
    if database is not None:
        if database != EMBEDDED or url_env is not None:
            raise StoreError(f"store.toml is invalid: database must be `{EMBEDDED}`, without database_url_env")
        return POSTGRESQL, None
    if not isinstance(url_env, str) or not _ENV_NAME.fullmatch(url_env):
        raise StoreError("store.toml is invalid: database_url_env must name an environment variable (A-Z, 0-9, _)")
    return POSTGRESQL, url_env


def valid_project_name(name: object) -> bool:
    return (
        isinstance(name, str)
        and bool(name.strip())
        and len(name.encode()) <= 128
        and not any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in name)
    )


def read_config(paths: StorePaths) -> StoreConfig:
    if not paths.is_initialized():
        raise NotInitialized()
    try:
        text = paths.config_file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise StoreError(f"store.toml could not be read: {type(exc).__name__}") from None
    return parse_config(text, "global" if paths.kind == "global" else "project")


def record_scope(paths: StorePaths) -> str:
    return read_config(paths).record_scope


def default_scopes(view: View, paths: StorePaths) -> list[str]:
    """The scopes a view may read by default (empty when the selected store is uninitialized)."""
    own = [record_scope(paths)] if paths.is_initialized() else []
    if view is View.PROJECT:
        return own + [GLOBAL]
    return own


def retrieval_stores(view: View, selected: StorePaths, dirs: PlatformDirs) -> list[StorePaths]:
    """The stores a read composes: the project view adds the global store when it is initialized."""
    stores = [selected]
    if view is View.PROJECT:
        glob = global_store(dirs)
        if glob.is_initialized():
            stores.append(glob)
    return stores


def initialize_store(paths: StorePaths, *, shared: bool = False, engine: str | None = None) -> bool:
    """Create the store if needed; return True when it was created. Idempotent. `engine`: where a new
    store keeps its records (default: the directory); an existing store must already use it. A
    PostgreSQL store's database is made ready (its tables created when missing) before a new
    `store.toml` is written, and again for an existing one (a `store.toml` copied from a directory store
    with the engine added, for example)."""
    if shared and paths.kind == "global":
        raise StoreError("shared stores require project scope")
    if shared and paths.gitignore.is_file() and not paths.config_file.exists():
        check_shared_ignore_rules(paths.gitignore.read_text(encoding="utf-8"))
    refuse_links(paths)
    make_private(paths.root)
    make_private(paths.records)
    make_private(paths.locks)
    tighten(paths)
    try:
        with exclusive_lock(paths.mutation_lock):
            created = False
            if not paths.config_file.exists():
                chosen, url_env = (POSTGRESQL, _url_env()) if engine == POSTGRESQL else (DIRECTORY, None)
                config = StoreConfig("global", "private", engine=chosen, database_url_env=url_env)
                if paths.kind == "project":
                    name = paths.root.parent.name or "project"
                    visibility = "shared" if shared else "private"
                    config = StoreConfig("project", visibility, new_record_id(), name, chosen, url_env)
                _prepare_engine(config)
                write_atomic(paths.config_file, config.render().encode())
                created = True
            config = read_config(paths)
            if engine is not None and config.engine != engine:
                raise StoreError(f"the store already keeps its records in the {config.engine} engine")
            if not created:
                _prepare_engine(config)
            if shared and config.visibility != "shared":
                raise StoreError("store is already private; explicit shared initialization requires a shared store")
            if paths.kind == "project":
                _ensure_gitignore(paths, config.visibility == "shared")
            return created
    except LockBusy:
        raise MutationBusy() from None


def _url_env() -> str | None:
    """A new PostgreSQL store's URL variable: DATABASE_URL_ENV when it is set, else None (the embedded server)."""
    return DATABASE_URL_ENV if os.environ.get(DATABASE_URL_ENV, "").strip() else None


def _prepare_engine(config: StoreConfig) -> None:
    """Ready the database of a PostgreSQL store; a directory store needs nothing."""
    if config.database is not None:
        from ..engines.postgresql import prepare_database

        prepare_database(config.database)


def tighten(paths: StorePaths) -> None:
    """Close the store's own directories and the cache to other users (made before stores were
    private, or checked out by git); files inside need no change once their directories are closed."""
    for directory in (paths.root, paths.records, paths.locks, paths.cache_dir):
        try:
            info = directory.lstat()
        except FileNotFoundError:  # no cache yet
            continue
        mode = stat.S_IMODE(info.st_mode)
        if stat.S_ISDIR(info.st_mode) and mode & 0o077:
            with contextlib.suppress(PermissionError):  # another user's directory: left as it is
                directory.chmod(mode & 0o700)


def _ensure_gitignore(paths: StorePaths, shared: bool) -> None:
    if paths.gitignore.exists():
        if shared:
            check_shared_ignore_rules(paths.gitignore.read_text(encoding="utf-8"))
        return
    write_atomic(paths.gitignore, (SHARED_GITIGNORE if shared else PRIVATE_GITIGNORE).encode())


def check_shared_ignore_rules(text: str) -> None:
    def rules(content: str) -> list[str]:
        stripped = (line.strip() for line in content.splitlines())
        return [line for line in stripped if line and not line.startswith("#")]

    if rules(text) != rules(SHARED_GITIGNORE):
        raise StoreError("shared project ignore rules are incomplete")
