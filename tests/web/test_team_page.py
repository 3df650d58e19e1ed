"""The review page of a real `sbuf serve --team` on loopback, in headless Chromium and over HTTP:
signing in with a team token on a form and out again, the session cookie's flags (Secure under
TLS), the session ending with its token, what each role sees and may post, four eyes, the
proposer and scope filters, scope labels, a record's history from the audit trail, and hostile
record text rendered inert."""

from __future__ import annotations

import json
import re
import subprocess
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx2
import pytest
from selenium.common.exceptions import NoAlertPresentException
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.ui import WebDriverWait

from stormbuffer.core.codec import parse_markdown
from stormbuffer.core.records import Record
from tests.helpers import SBUF, Sandbox
from tests.http.conftest import LISTENING, TIMEOUT, sandbox_with_stores, start
from tests.team.test_server import Team

from .conftest import Tracker, chromium, snapshot

WAIT = 20
FORM = "application/x-www-form-urlencoded"
SOURCE = {"kind": "conversation", "reference": "chat", "actor": "agent"}
SECOND = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(Z|[+-]\d\d:\d\d)")
CROSS_STORE = "project:01900000-0000-7000-8000-000000000bad"


class TeamPage(Team):
    """A team server, the tokens made for it, and its review page as each holder uses it."""

    @property
    def url(self) -> str:
        return self.server.base_url

    def invoke(self, name: str, operation: str, request: dict[str, object]) -> dict[str, object]:
        """A protocol call through `/v1/invoke/…` with `name`'s token, as an agent makes it."""
        answer = self.call(name, "POST", f"/v1/invoke/{operation}", {"version": 1, **request})
        assert answer.status_code == 200, answer.text
        result: dict[str, object] = answer.json()["result"]
        return result

    def remember(self, name: str, title: str, body: str) -> str:
        """A candidate `name` proposed; its id."""
        result = self.invoke(name, "remember", {"title": title, "kind": "fact", "body": body, "source": SOURCE})
        assert result["status"] == "candidate", result
        return str(result["record_id"])

    def on_disk(self, record_id: str) -> Record:
        path = self.server.box.project_root / "records" / f"{record_id}.md"
        return parse_markdown(path.read_bytes(), path.name)

    @contextmanager
    def session(self, name: str) -> Iterator[httpx2.Client]:
        """A client signed in on the form with `name`'s token: it holds the session cookie only."""
        with httpx2.Client(base_url=self.url, timeout=TIMEOUT, trust_env=False, follow_redirects=False) as client:
            answer = client.post("/sign-in", content=urllib.parse.urlencode({"token": self.tokens[name]}),
                                 headers={"Origin": self.url, "Content-Type": FORM})  # fmt: skip
            assert (answer.status_code, answer.headers["Location"]) == (303, "/"), answer.text
            yield client

    def post_form(self, client: httpx2.Client, path: str, fields: list[tuple[str, str]]) -> httpx2.Response:
        """A page's form as the browser sends it: the page's CSRF token first, from this origin."""
        page = client.get("/")
        assert page.status_code == 200, page.text
        found = re.search(r'name="csrf" value="([^"]+)"', page.text)
        assert found is not None
        return client.post(path, content=urllib.parse.urlencode([("csrf", found.group(1)), *fields]),
                           headers={"Origin": self.url, "Content-Type": FORM})  # fmt: skip

    def audit(self) -> str:
        return (self.server.box.project_root / "team" / "audit.jsonl").read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def team(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TeamPage]:
    box = sandbox_with_stores(tmp_path_factory.mktemp("teampage") / "sandbox", None)
    server = start(box, "--team")
    crew = TeamPage(server)
    for name, role in (("alice", "reviewer"), ("carol", "reviewer"), ("bot", "agent"), ("rita", "reader")):
        crew.make(name, role)
    crew.make("other", "reviewer", "--scope", CROSS_STORE)
    yield crew
    assert server.stop() == 0


@pytest.fixture(scope="module")
def browser() -> Iterator[WebDriver]:
    driver = chromium()
    yield driver
    driver.quit()


def sign_in(driver: WebDriver, url: str, token: str) -> None:
    """Open the page, land on the sign-in form, paste the token and submit it."""
    driver.delete_all_cookies()
    driver.get(url + "/")
    WebDriverWait(driver, WAIT).until(expected_conditions.url_to_be(url + "/sign-in"))
    driver.find_element(By.ID, "token").send_keys(token, Keys.ENTER)
    WebDriverWait(driver, WAIT).until(expected_conditions.url_to_be(url + "/"))


def test_sign_in_on_the_form_and_out_again(team: TeamPage, browser: WebDriver) -> None:
    token = team.tokens["alice"]
    sign_in(browser, team.url, token)
    assert browser.find_element(By.ID, "who").text == "alice"
    (cookie,) = browser.get_cookies()
    assert (cookie["httpOnly"], cookie["sameSite"], cookie["secure"]) == (True, "Strict", False)
    assert token not in browser.page_source and token not in browser.current_url
    assert cookie["value"] not in token  # a session id, not the token
    browser.find_element(By.ID, "sign-out").click()
    WebDriverWait(browser, WAIT).until(expected_conditions.url_to_be(team.url + "/sign-in"))
    assert browser.get_cookies() == []
    with httpx2.Client(base_url=team.url, timeout=TIMEOUT, trust_env=False) as replay:  # the old cookie, kept
        answer = replay.get("/", headers={"Cookie": f"{cookie['name']}={cookie['value']}"})
    assert (answer.status_code, answer.headers["Location"]) == (303, "/sign-in")
    entries = [json.loads(line) for line in team.audit().splitlines()]
    assert {"who": "alice", "operation": "sign-in", "status": 303} in [
        {key: entry[key] for key in ("who", "operation", "status")} for entry in entries
    ]
    assert token not in team.audit() and token.split("_")[-1] not in "".join(team.server.log)


def test_a_wrong_or_queried_token_signs_nobody_in(team: TeamPage) -> None:
    with httpx2.Client(base_url=team.url, timeout=TIMEOUT, trust_env=False) as client:
        wrong = team.tokens["alice"][:-2] + "zz"
        refused = client.post("/sign-in", content=urllib.parse.urlencode({"token": wrong}),
                              headers={"Origin": team.url, "Content-Type": FORM})  # fmt: skip
        assert refused.status_code == 401 and "set-cookie" not in refused.headers
        assert wrong not in refused.text and "not an active team token" in refused.text
        queried = client.get("/sign-in", params={"token": team.tokens["alice"]})  # never from an address
        assert queried.status_code == 401 and "set-cookie" not in queried.headers
        assert client.get("/").status_code == 303


def test_revoking_the_token_ends_its_session_at_the_next_request(team: TeamPage) -> None:
    team.make("dave", "reviewer")
    with team.session("dave") as dave:
        assert dave.get("/").status_code == 200
        assert team.server.box.sbuf("--project", "team", "token", "revoke", "dave").returncode == 0
        ended = dave.get("/")
        assert (ended.status_code, ended.headers["Location"]) == (303, "/sign-in")


def test_a_reader_is_offered_no_decision_and_a_forged_one_is_refused(team: TeamPage, browser: WebDriver) -> None:
    record_id = team.remember("bot", "Reader sees this", "A candidate a reader may read.")
    sign_in(browser, team.url, team.tokens["rita"])
    card = browser.find_element(By.CSS_SELECTOR, f'article.candidate[data-id="{record_id}"]')
    assert "Reader sees this" in card.text
    for selector in ("button.approve", "button.reject", "a.edit", "input[type=checkbox]", ".bulk"):
        assert not browser.find_elements(By.CSS_SELECTOR, selector), selector
    browser.get(f"{team.url}/records/{record_id}")
    assert not browser.find_elements(By.CSS_SELECTOR, "form.actions button")
    with team.session("rita") as rita:
        edit = [("title", "Mine"), ("kind", "fact"), ("body", "x")]
        for path, fields in ((f"/records/{record_id}/lifecycle", [("action", "approve")]),
                             ("/review/decide", [("one", f"approve:{record_id}")]),
                             (f"/records/{record_id}/edit", edit)):  # fmt: skip
            assert team.post_form(rita, path, fields).status_code == 403, path
        assert rita.get(f"/records/{record_id}/edit").status_code == 403
    assert team.on_disk(record_id).status == "candidate"


def test_nobody_is_offered_or_allowed_to_approve_their_own_candidate(team: TeamPage, browser: WebDriver) -> None:
    record_id = team.remember("carol", "Carol's own idea", "Proposed by a reviewer.")
    sign_in(browser, team.url, team.tokens["carol"])
    card = browser.find_element(By.CSS_SELECTOR, f'article.candidate[data-id="{record_id}"]')
    assert "carol" in card.find_element(By.CSS_SELECTOR, ".proposer").text
    assert not card.find_elements(By.CSS_SELECTOR, "button.approve, a.edit")
    assert card.find_elements(By.CSS_SELECTOR, "button.reject")
    snapshot(browser, "team-own-candidate")
    with team.session("carol") as carol:
        for path, fields in ((f"/records/{record_id}/lifecycle", [("action", "approve")]),
                             ("/review/decide", [("action", "approve"), ("id", record_id)]),
                             (f"/records/{record_id}/edit", [("etag", "x"), ("status_of", "active"), ("title", "T"),
                                                             ("kind", "fact"), ("body", "b")])):  # fmt: skip
            answer = team.post_form(carol, path, fields)
            assert answer.status_code == 403 and "does not allow" in answer.text, (path, answer.text)
        assert carol.get(f"/records/{record_id}/edit").status_code == 403
    assert team.on_disk(record_id).status == "candidate"
    with team.session("alice") as alice:  # another reviewer may
        assert team.post_form(alice, f"/records/{record_id}/lifecycle", [("action", "approve")]).status_code == 303
    assert team.on_disk(record_id).status == "active"


def test_another_scopes_token_finds_nothing(team: TeamPage) -> None:
    record_id = team.remember("bot", "Not for other scopes", "Invisible outside this store's scope.")
    project = re.search(r'project_name = "([^"]+)"', (team.server.box.project_root / "store.toml").read_text())
    assert project is not None
    with team.session("other") as other:
        for path in ("/", f"/records/{record_id}", "/search?q=scopes", "/health"):
            answer = other.get(path)
            assert answer.status_code == 404, (path, answer.text)
            for secret in ("Not for other scopes", record_id, project.group(1), "Payments team"):
                assert secret not in answer.text, (path, secret)


def test_filters_by_proposer_and_scope_named_by_label(team: TeamPage, browser: WebDriver) -> None:
    by_bot = team.remember("bot", "Filtered: from bot", "One proposer.")
    by_carol = team.remember("carol", "Filtered: from carol", "Another proposer.")
    project = re.search(r'project_name = "([^"]+)"', (team.server.box.project_root / "store.toml").read_text())
    assert project is not None
    sign_in(browser, team.url, team.tokens["alice"])
    scope_choice = browser.find_element(By.ID, "scope")
    assert project.group(1) in scope_choice.text and "project:" not in browser.find_element(By.TAG_NAME, "body").text
    browser.find_element(By.CSS_SELECTOR, '#proposer option[value="bot"]').click()
    browser.find_element(By.CSS_SELECTOR, "form.filters button").click()
    WebDriverWait(browser, WAIT).until(expected_conditions.url_contains("proposer=bot"))
    shown = {card.get_attribute("data-id") for card in browser.find_elements(By.CSS_SELECTOR, "article.candidate")}
    assert by_bot in shown and by_carol not in shown
    for card in browser.find_elements(By.CSS_SELECTOR, "article.candidate"):
        assert card.find_element(By.CSS_SELECTOR, ".proposer-name").text == "bot"
        for stamp in card.find_elements(By.TAG_NAME, "time"):
            assert SECOND.fullmatch(stamp.text), stamp.text  # to the second
    labelled = team.server.box.sbuf("--project", "team", "scope", "label", team.server.scope, "Payments team")
    assert labelled.returncode == 0, labelled.stderr
    browser.get(f"{team.url}/?proposer=carol&scope={urllib.parse.quote(team.server.scope)}")
    assert [card.get_attribute("data-id") for card in browser.find_elements(By.CSS_SELECTOR, "article.candidate")
            if "Filtered" in card.text] == [by_carol]  # fmt: skip
    assert "Payments team" in browser.find_element(By.CSS_SELECTOR, f'article[data-id="{by_carol}"] .scope').text
    assert team.server.scope not in browser.find_element(By.TAG_NAME, "body").text
    snapshot(browser, "team-inbox-filtered")
    browser.get(f"{team.url}/?scope=global")
    assert not browser.find_elements(By.CSS_SELECTOR, "article.candidate")


def test_a_label_must_be_readable_text(team: TeamPage) -> None:
    for scope, label, message in ((team.server.scope, " padded", "printable characters"),
                                  ("nonsense", "Name", "invalid scope")):  # fmt: skip
        refused = team.server.box.sbuf("--project", "team", "scope", "label", scope, label)
        assert refused.returncode != 0 and message in refused.stderr, refused.stderr
        assert "Traceback" not in refused.stderr


def test_a_history_says_who_proposed_approved_changed_and_recalled_it(team: TeamPage, browser: WebDriver) -> None:
    record_id = team.remember("bot", "Rollbacks use the previous image", "Redeploy the previous image tag.")
    with team.session("alice") as alice:
        assert team.post_form(alice, f"/records/{record_id}/lifecycle", [("action", "approve")]).status_code == 303
    recalled = team.invoke("rita", "context", {"query": "rollbacks previous image"})
    assert record_id in json.dumps(recalled)
    sign_in(browser, team.url, team.tokens["carol"])
    browser.get(f"{team.url}/records/{record_id}/edit")
    body = browser.find_element(By.ID, "body")
    body.clear()
    body.send_keys("Redeploy the previous image tag, then check health.")
    browser.find_element(By.CSS_SELECTOR, "form.editor button.approve").click()
    WebDriverWait(browser, WAIT).until(expected_conditions.url_contains("done=saved"))
    rows = [[cell.text for cell in row.find_elements(By.TAG_NAME, "td")]
            for row in browser.find_elements(By.CSS_SELECTOR, "table.events tbody tr")]  # fmt: skip
    assert [(who, what, door) for _, who, what, door in rows] == [
        ("bot", "proposed", "http"), ("alice", "approved", "web"), ("rita", "recalled", "http"),
        ("carol", "changed", "web"),
    ]  # fmt: skip
    assert all(SECOND.fullmatch(when) for when, *_ in rows)
    browser.execute_script("document.querySelector('table.events').scrollIntoView()")
    snapshot(browser, "team-record-history")


def test_hostile_record_text_renders_inert(team: TeamPage, browser: WebDriver, tracker: str) -> None:
    hostile = (
        f"<script>alert('script')</script>\n\n<img src=x onerror=\"alert('onerror')\">\n\n"
        f"[click me](javascript:alert('link'))\n\n![pixel]({tracker}/pixel.png)\n\n"
        f'<iframe src="{tracker}/frame"></iframe>'
    )
    record_id = team.remember("bot", "<script>alert('title')</script><img src=x onerror=alert(2)>", hostile)
    sign_in(browser, team.url, team.tokens["alice"])
    for path in ("/?proposer=bot", f"/records/{record_id}"):
        browser.get(team.url + path)
        for link in browser.find_elements(By.PARTIAL_LINK_TEXT, "click me"):
            link.click()
        with pytest.raises(NoAlertPresentException):
            browser.switch_to.alert.text  # noqa: B018 - reading it is the check
        assert "<script>alert('title')</script>" in browser.find_element(By.TAG_NAME, "main").text
        assert not browser.find_elements(By.CSS_SELECTOR, "main script, main img, main iframe, main [onerror]")
    assert Tracker.hits == []


def test_under_tls_the_cookie_is_secure(tmp_path: Path) -> None:
    box: Sandbox = sandbox_with_stores(tmp_path / "sandbox", None)
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True, timeout=TIMEOUT)  # fmt: skip
    made = box.sbuf("--project", "team", "token", "create", "--name", "alice", "--role", "reviewer")
    assert made.returncode == 0, made.stderr
    token = made.stdout.splitlines()[-1]
    process = subprocess.Popen([str(SBUF), "--project", "serve", "--team", "--port", "0", "--tls-cert", str(cert),
                                "--tls-key", str(key)], cwd=box.cwd, env=box.env, stdin=subprocess.DEVNULL,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)  # fmt: skip
    driver = chromium(insecure_certs=True)
    try:
        assert process.stderr is not None
        url = "https://" + next(found.group(1) for line in process.stderr if (found := LISTENING.search(line)))
        sign_in(driver, url, token)
        (cookie,) = driver.get_cookies()
        assert (cookie["httpOnly"], cookie["sameSite"], cookie["secure"]) == (True, "Strict", True)
        driver.find_element(By.ID, "sign-out").click()  # a form posted from the https origin is accepted
        WebDriverWait(driver, WAIT).until(expected_conditions.url_to_be(url + "/sign-in"))
        assert driver.get_cookies() == []
    finally:
        driver.quit()
        process.terminate()
        assert process.wait(timeout=TIMEOUT) == 0


def test_records_meant_for_people_exist_for_reviewers_only(team: TeamPage) -> None:
    record_id = "01900000-0000-7000-8000-0000000000a1"
    team.server.write(record_id, title="For people only", status="candidate", access="human")
    with team.session("rita") as rita, team.session("alice") as alice:
        assert "For people only" not in rita.get("/").text
        assert rita.get(f"/records/{record_id}").status_code == 404
        assert rita.get("/health").status_code == 403
        assert "For people only" in alice.get("/").text
        assert alice.get(f"/records/{record_id}").status_code == 200


def test_a_forms_token_belongs_to_its_session(team: TeamPage) -> None:
    record_id = team.remember("bot", "Decided with the right form only", "A candidate.")
    with team.session("alice") as alice, team.session("carol") as carol:
        found = re.search(r'name="csrf" value="([^"]+)"', alice.get("/").text)
        assert found is not None
        form = urllib.parse.urlencode([("csrf", found.group(1)), ("action", "reject")])
        borrowed = carol.post(f"/records/{record_id}/lifecycle", headers={"Origin": team.url, "Content-Type": FORM},
                              content=form)  # fmt: skip
        assert borrowed.status_code == 403
        assert team.on_disk(record_id).status == "candidate"
        assert team.post_form(carol, f"/records/{record_id}/lifecycle", [("action", "reject")]).status_code == 303
    assert team.on_disk(record_id).status == "archived"
