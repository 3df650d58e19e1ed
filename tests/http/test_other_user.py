"""Another user of the machine, against a running `sbuf serve`: without the token they read nothing,
write nothing, cannot act through the review page, and cannot read the token file. The server runs as
this user (root, as in CI); the other user is uid 65534 (`nobody`), set with setuid in the child
process, running Debian's curl and cat."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from stormbuffer.auth.credential import token_path
from tests.helpers import tree_digest

from .conftest import SECRET, TIMEOUT, Server, sandbox_with_stores, start

OTHER_UID = 65534
HUMAN_ONLY = "01900000-0000-7000-8000-0000000b0b0b"
CANDIDATE = "01900000-0000-7000-8000-0000000c0c0c"


def as_other_user() -> None:
    os.setgroups([])
    os.setgid(OTHER_UID)
    os.setuid(OTHER_UID)


def run_as_other(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), preexec_fn=as_other_user, capture_output=True, text=True, timeout=TIMEOUT,
                          env={"PATH": "/usr/bin:/bin"}, cwd="/", check=False)  # fmt: skip


def curl(*args: str) -> tuple[int, str]:
    """`curl` as the other user: the status code and the body."""
    done = run_as_other(shutil.which("curl") or "curl", "-sS", "-o", "-", "-w", "\n%{http_code}", *args)
    body, _, status = done.stdout.rpartition("\n")
    return int(status), body


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    assert os.geteuid() == 0, "this test acts as a second user through setuid, so it runs as root (as CI does)"
    base = Path(tempfile.mkdtemp(prefix="sbuf-other-user-"))
    try:
        served = start(sandbox_with_stores(base / "sandbox", None))
        served.write(HUMAN_ONLY, title="Only for people", access="human", body=f"The vault code is {SECRET}.\n")
        served.write(CANDIDATE, title="Awaiting review", status="candidate", access="agent")
        # Everything up to the configuration directory is open to others, as a home directory often is:
        # only the credential's own directory and file modes keep the token private.
        for folder in (base, base / "sandbox", base / "sandbox" / "home", base / "sandbox" / "home" / ".config"):
            folder.chmod(0o755)
        yield served
        assert served.stop() == 0
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_the_other_user_cannot_read_the_token_file(server: Server) -> None:
    path = token_path(server.box.env)
    assert (path.stat().st_mode & 0o777, path.parent.stat().st_mode & 0o777) == (0o600, 0o700)
    assert run_as_other("/bin/ls", str(path.parent.parent)).returncode == 0  # the directory above is open
    for command in (("/bin/cat", str(path)), ("/bin/ls", str(path.parent))):
        done = run_as_other(*command)
        assert done.returncode != 0 and "Permission denied" in done.stderr
        assert server.token not in done.stdout


def test_the_other_user_reads_and_writes_nothing(server: Server) -> None:
    before = tree_digest(server.box.project_root / "records")
    url = server.base_url
    json = ("-H", "Content-Type: application/json")
    for args in (
        (f"{url}/v1/records?all=true",),
        (f"{url}/v1/records/{HUMAN_ONLY}",),
        (f"{url}/v1/search?query=vault+code",),
        (f"{url}/v1/invoke/get", *json, "-d", f'{{"version":1,"id":"{HUMAN_ONLY}"}}'),
        (f"{url}/v1/records", *json, "-d", '{"title":"Planted","kind":"fact","access":"human","body":"b",'
                                           '"sources":[{"kind":"url","reference":"r","actor":"a"}]}'),
        (f"{url}/v1/records/{HUMAN_ONLY}/archive", *json, "-X", "POST"),
        (f"{url}/v1/records/{CANDIDATE}/approve", *json, "-X", "POST"),
    ):  # fmt: skip
        status, body = curl(*args)
        assert status == 401, (args, body)
        assert "Only for people" not in body and SECRET not in body and "Awaiting review" not in body
    assert tree_digest(server.box.project_root / "records") == before


def test_the_other_user_cannot_use_the_review_page(server: Server) -> None:
    before = tree_digest(server.box.project_root / "records")
    url, origin = server.base_url, ("-H", f"Origin: {server.base_url}")
    for path in ("/", f"/records/{HUMAN_ONLY}", f"/records/{HUMAN_ONLY}/edit", "/search?q=vault", "/health"):
        status, body = curl(url + path)
        assert status == 303 and "Only for people" not in body, path
    status, page = curl(url + "/sign-in")
    assert status == 401 and 'name="csrf"' not in page  # nothing to scrape a form token from
    for path, form in (
        ("/review/decide", f"csrf=guessed&one=approve:{CANDIDATE}"),
        (f"/records/{HUMAN_ONLY}/lifecycle", "csrf=guessed&action=archive"),
        ("/sign-in", "token=guessed"),
    ):
        status, body = curl(url + path, *origin, "--data", form)
        assert status in (303, 401), (path, status)
        assert "Set-Cookie" not in body
    forged = f"stormbuffer_session_{server.port}=guessed"
    status, _ = curl(url + "/", "-H", f"Cookie: {forged}")
    assert status == 303
    assert tree_digest(server.box.project_root / "records") == before
