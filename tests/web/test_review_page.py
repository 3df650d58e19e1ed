"""The review page in headless Chromium against a real `sbuf serve` and a real project store."""

from __future__ import annotations

import html
import re
import urllib.parse

import pytest
from selenium.common.exceptions import NoAlertPresentException
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.ui import WebDriverWait

from .conftest import Server, Tracker, agent_update, chromium, fetch, sign_in, snapshot

pytestmark = pytest.mark.usefixtures("shot")
WAIT = 20
FORM = {"Content-Type": "application/x-www-form-urlencoded"}


def open_page(browser: WebDriver, server: Server, path: str) -> None:
    browser.get(server.url + path)
    WebDriverWait(browser, WAIT).until(lambda driver: driver.execute_script("return document.readyState") == "complete")


def notice(browser: WebDriver, text: str) -> None:
    """Wait for the message a decided form leaves on the next page."""
    located = (By.CSS_SELECTOR, ".notice")
    WebDriverWait(browser, WAIT).until(expected_conditions.text_to_be_present_in_element(located, text))


def candidate_card(browser: WebDriver, record_id: str):  # type: ignore[no-untyped-def]
    return browser.find_element(By.CSS_SELECTOR, f'article.candidate[data-id="{record_id}"]')


def test_approving_a_candidate_changes_its_file(browser: WebDriver, server: Server) -> None:
    record_id = server.propose("Deploys wait for a green build", "Run the suite before tagging a release.")
    open_page(browser, server, "/")
    assert browser.title.startswith("Inbox (")
    card = candidate_card(browser, record_id)
    assert "Run the suite before tagging a release." in card.text
    card.find_element(By.CSS_SELECTOR, "button.approve").click()
    WebDriverWait(browser, WAIT).until(
        expected_conditions.text_to_be_present_in_element((By.CSS_SELECTOR, ".notice"), "Approved.")
    )
    assert server.on_disk(record_id).status == "active"
    assert not browser.find_elements(By.CSS_SELECTOR, f'article.candidate[data-id="{record_id}"]')


def test_rejecting_a_candidate_archives_it(browser: WebDriver, server: Server) -> None:
    record_id = server.propose("Tabs are better than spaces", "A preference nobody agreed to.")
    open_page(browser, server, "/")
    candidate_card(browser, record_id).find_element(By.CSS_SELECTOR, "button.reject").click()
    WebDriverWait(browser, WAIT).until(
        expected_conditions.text_to_be_present_in_element((By.CSS_SELECTOR, ".notice"), "Rejected")
    )
    assert server.on_disk(record_id).status == "archived"


def test_keyboard_only_review_of_three_candidates(browser: WebDriver, server: Server) -> None:
    ids = [server.propose(f"Keyboard review {n}", f"Candidate number {n} for the keyboard.") for n in range(3)]
    decisions = {}
    for record_id, key in zip(ids, ("a", "r", "a"), strict=True):
        open_page(browser, server, "/")
        card = candidate_card(browser, record_id)
        for _ in range(50):  # j walks from the first candidate, focused on load, to this one
            if browser.switch_to.active_element == card:
                break
            browser.switch_to.active_element.send_keys("j")
        assert browser.switch_to.active_element == card
        browser.switch_to.active_element.send_keys(key)
        WebDriverWait(browser, WAIT).until(
            expected_conditions.presence_of_element_located((By.CSS_SELECTOR, ".notice"))
        )
        decisions[record_id] = "active" if key == "a" else "archived"
    assert {record_id: server.on_disk(record_id).status for record_id in ids} == decisions


def test_bulk_approve(browser: WebDriver, server: Server) -> None:
    ids = [server.propose(f"Bulk item {n}", f"Bulk candidate {n}.") for n in range(2)]
    open_page(browser, server, "/")
    for record_id in ids:
        candidate_card(browser, record_id).find_element(By.CSS_SELECTOR, "input[type=checkbox]").click()
    snapshot(browser, "inbox")
    browser.find_element(By.CSS_SELECTOR, 'button[name="action"][value="approve"]').click()
    notice(browser, "")
    assert [server.on_disk(record_id).status for record_id in ids] == ["active", "active"]


def test_an_update_shows_its_diff_and_approving_supersedes(browser: WebDriver, server: Server) -> None:
    old_id, new_id = agent_update(
        server,
        "Builds use the lockfile",
        "Install from the lockfile.\n",
        "Install from the lockfile; CI fails when stale.\n",
    )
    open_page(browser, server, "/")
    card = candidate_card(browser, new_id)
    rows = card.find_elements(By.CSS_SELECTOR, "table.diff tr.replace")
    assert [row.text for row in rows] == ["Install from the lockfile. Install from the lockfile; CI fails when stale."]
    snapshot(browser, "inbox-update-diff")
    card.find_element(By.CSS_SELECTOR, "button.approve").click()
    notice(browser, "")
    assert (server.on_disk(old_id).status, server.on_disk(new_id).status) == ("superseded", "active")
    open_page(browser, server, f"/records/{old_id}")
    history = browser.find_element(By.CSS_SELECTOR, "ol.history").text
    assert "Superseded by Builds use the lockfile" in history


def test_edit_then_approve_a_candidate(browser: WebDriver, server: Server) -> None:
    record_id = server.propose("Cache keys include the lockfile hash", "Cache keys hash the lockfile")
    open_page(browser, server, "/")
    candidate_card(browser, record_id).find_element(By.CSS_SELECTOR, "a.edit").click()
    WebDriverWait(browser, WAIT).until(expected_conditions.presence_of_element_located((By.ID, "body")))
    body = browser.find_element(By.ID, "body")
    body.send_keys(" and the toolchain version.")
    browser.find_element(By.CSS_SELECTOR, "form.editor button[type=submit]").click()
    WebDriverWait(browser, WAIT).until(
        expected_conditions.text_to_be_present_in_element((By.CSS_SELECTOR, ".notice"), "Saved.")
    )
    stored = server.on_disk(record_id)
    assert (stored.status, stored.body.strip()) == ("active", "Cache keys hash the lockfile and the toolchain version.")


def test_an_invalid_edit_keeps_the_typed_text(browser: WebDriver, server: Server) -> None:
    record_id = server.add("Keep drafts", "Typed work is never thrown away.")
    before = server.record_file(record_id).read_bytes()
    open_page(browser, server, f"/records/{record_id}/edit")
    browser.find_element(By.ID, "title").clear()
    browser.find_element(By.ID, "title").send_keys(" ")
    body = browser.find_element(By.ID, "body")
    body.clear()
    body.send_keys("A long paragraph the person typed.")
    browser.find_element(By.CSS_SELECTOR, "form.editor button[type=submit]").click()
    WebDriverWait(browser, WAIT).until(expected_conditions.presence_of_element_located((By.CSS_SELECTOR, ".error")))
    assert browser.find_element(By.ID, "body").get_attribute("value") == "A long paragraph the person typed."
    assert server.record_file(record_id).read_bytes() == before


def test_edit_with_a_conflicting_external_change(browser: WebDriver, server: Server) -> None:
    record_id = server.add("Release checklist", "Tag, then publish.")
    open_page(browser, server, f"/records/{record_id}/edit")
    body = browser.find_element(By.ID, "body")
    body.clear()
    body.send_keys("Tag, build, then publish. (mine)")
    path = server.record_file(record_id)  # someone else saves meanwhile
    path.write_text(path.read_text().replace("Tag, then publish.", "Tag, sign, then publish. (theirs)"))
    browser.find_element(By.CSS_SELECTOR, "form.editor button[type=submit]").click()
    WebDriverWait(browser, WAIT).until(expected_conditions.title_contains("Changed meanwhile"))
    page = browser.find_element(By.TAG_NAME, "main").text
    assert "(theirs)" in page and "(mine)" in page
    snapshot(browser, "edit-conflict")
    assert "(theirs)" in server.on_disk(record_id).body  # nothing was overwritten yet
    browser.find_element(By.CSS_SELECTOR, "button.mine").click()
    WebDriverWait(browser, WAIT).until(
        expected_conditions.text_to_be_present_in_element((By.CSS_SELECTOR, ".notice"), "Saved.")
    )
    assert server.on_disk(record_id).body.strip() == "Tag, build, then publish. (mine)"


def test_search_and_open_a_hit(browser: WebDriver, server: Server) -> None:
    record_id = server.add("Database migrations run before deploy", "Apply schema migrations, then roll out.")
    open_page(browser, server, "/search")
    box = browser.find_element(By.ID, "q")
    box.send_keys("how do we migrate the schema", Keys.ENTER)
    WebDriverWait(browser, WAIT).until(expected_conditions.presence_of_element_located((By.ID, "mode")))
    assert browser.find_element(By.ID, "mode").text == "hybrid"
    hit = browser.find_element(By.CSS_SELECTOR, f'.hit a[href^="/records/{record_id}"]')
    assert browser.find_elements(By.CSS_SELECTOR, ".hit .reasons .tag")
    snapshot(browser, "search-results")
    hit.click()
    WebDriverWait(browser, WAIT).until(expected_conditions.title_contains("Database migrations"))
    assert "Apply schema migrations" in browser.find_element(By.CSS_SELECTOR, ".record .body").text


def test_a_hostile_record_renders_inert(browser: WebDriver, server: Server, tracker: str) -> None:
    hostile = (
        f"<script>alert('script')</script>\n\n<img src=x onerror=\"alert('onerror')\">\n\n"
        f"[click me](javascript:alert('link'))\n\n![pixel]({tracker}/pixel.png)\n\n"
        f'<iframe src="{tracker}/frame"></iframe> <link rel=stylesheet href="{tracker}/style.css">'
    )
    record_id = server.propose('Hostile <b>title</b> " onmouseover="alert(1)', hostile)
    for path in ("/", f"/records/{record_id}"):
        open_page(browser, server, path)
        for link in browser.find_elements(By.PARTIAL_LINK_TEXT, "click me"):
            link.click()
        with pytest.raises(NoAlertPresentException):
            browser.switch_to.alert.text  # noqa: B018 - reading it is the check
    page = browser.find_element(By.TAG_NAME, "main").text
    assert "<script>alert('script')</script>" in page  # shown as text, never run
    assert not browser.find_elements(By.CSS_SELECTOR, "main script, main img, main iframe, main [onerror]")
    assert Tracker.hits == []


def test_a_form_post_without_the_csrf_token_is_refused(server: Server) -> None:
    record_id = server.propose("Needs a decision", "A candidate that a forged form tries to approve.")
    form = urllib.parse.urlencode({"one": f"approve:{record_id}"}).encode()
    # even signed in and from the page's own origin, a form needs the page's token
    answer = fetch(server, "/review/decide", data=form, headers={**FORM, "Origin": server.url})
    assert answer.status == 403
    assert server.on_disk(record_id).status == "candidate"


def test_pages_carry_a_policy_without_inline_scripts(server: Server) -> None:
    for path in ("/", "/search?q=deploy", "/health"):
        answer = fetch(server, path)
        policy = answer.headers["Content-Security-Policy"]
        assert "script-src 'self'" in policy and "unsafe-inline" not in policy
        assert "<script>" not in answer.body and "onclick" not in answer.body
        assert (answer.headers["Cache-Control"], answer.headers["X-Content-Type-Options"]) == ("no-store", "nosniff")


def test_narrow_screen_and_health(browser: WebDriver, server: Server) -> None:
    server.propose("Shown on a phone", "The inbox fits a narrow screen.")
    browser.set_window_size(360, 800)
    try:
        for path in ("/", "/search?q=phone", "/health"):
            open_page(browser, server, path)
            assert browser.execute_script("return document.documentElement.scrollWidth") <= 360
        assert "Audit findings" in browser.find_element(By.TAG_NAME, "main").text
    finally:
        browser.set_window_size(1100, 900)


def test_reading_and_deciding_work_without_javascript(server: Server) -> None:
    record_id = server.propose("Works without scripts", "Plain forms and links.")
    driver = chromium(javascript=False)
    try:
        sign_in(driver, server)
        open_page(driver, server, "/")
        assert driver.switch_to.active_element.tag_name == "body"  # the page's script, which focuses a card, is off
        assert "Plain forms and links." in candidate_card(driver, record_id).text
        candidate_card(driver, record_id).find_element(By.CSS_SELECTOR, "button.approve").click()
        notice(driver, "")
        snapshot(driver, "test_reading_and_deciding_work_without_javascript")
    finally:
        driver.quit()
    assert server.on_disk(record_id).status == "active"


def csrf_token(server: Server) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', fetch(server, "/").body)
    assert found is not None
    return found.group(1)


def test_a_cross_site_form_is_refused_even_with_the_token(server: Server) -> None:
    record_id = server.propose("Cross-site target", "A candidate another site's form tries to approve.")
    form = urllib.parse.urlencode({"csrf": csrf_token(server), "one": f"approve:{record_id}"}).encode()
    port = server.port
    for headers, path, status in (
        ({"Origin": "http://attacker.example"}, "/review/decide", 403),  # another site
        ({"Origin": "http://localhost"}, "/review/decide", 403),  # this host, another port
        ({"Origin": "http://127.0.0.1"}, "/review/decide", 403),
        ({"Origin": f"https://127.0.0.1:{port}"}, "/review/decide", 403),  # another scheme
        ({"Origin": server.url, "Sec-Fetch-Site": "same-site"}, "/review/decide", 403),  # a sibling origin's page
        ({"Origin": server.url, "Sec-Fetch-Site": "cross-site"}, "/review/decide", 403),
        ({"Origin": server.url, "Content-Type": "application/json"}, f"/v1/records/{record_id}/approve",
         401),  # the API takes no cookie
        ({"Origin": server.url, "Authorization": f"Bearer {server.token}"}, f"/v1/records/{record_id}/approve",
         415),  # and no forms
    ):  # fmt: skip
        answer = fetch(server, path, data=form, headers={**FORM, **headers})
        assert answer.status == status, (headers, path, answer)
    assert server.on_disk(record_id).status == "candidate"
    accepted = fetch(server, "/review/decide", data=form, headers={**FORM, "Origin": server.url,
                                                                  "Sec-Fetch-Site": "same-origin"})  # fmt: skip
    assert accepted.status == 303
    assert server.on_disk(record_id).status == "active"


def test_without_the_session_every_page_leads_to_sign_in(server: Server) -> None:
    record_id = server.propose("Private until signed in", "Nothing of this shows before signing in.")
    for path in ("/", "/search?q=private", "/health", f"/records/{record_id}", f"/records/{record_id}/edit"):
        answer = fetch(server, path, signed_in=False)
        assert (answer.status, answer.headers["Location"]) == (303, "/sign-in"), path
        assert "Private until signed in" not in answer.body
    page = fetch(server, "/sign-in", signed_in=False)
    assert page.status == 401 and 'name="csrf"' not in page.body and "Private until" not in page.body
    assert fetch(server, "/sign-in").headers["Location"] == "/"  # signed in already
    for cookie in (server.cookie.split("=", 1)[0] + "=forged", "stormbuffer_session_1=" + server.cookie.split("=")[1]):
        assert fetch(server, "/", signed_in=False, headers={"Cookie": cookie}).status == 303
    wrong = fetch(server, "/sign-in?token=" + "A" * 43, signed_in=False)
    assert wrong.status == 401 and "Set-Cookie" not in wrong.headers
    form = fetch(server, "/review/decide", signed_in=False, data=f"one=approve:{record_id}".encode(),
                 headers={**FORM, "Origin": server.url})  # fmt: skip
    assert form.status == 303 and form.headers["Location"] == "/sign-in"
    assert server.on_disk(record_id).status == "candidate"


def test_signing_in_with_the_pasted_token(server: Server) -> None:
    """A browser without the printed address: the sign-in form takes the token once; the session
    cookie it sets is HttpOnly and SameSite=Strict, and the address holds no token afterwards."""
    cookie = fetch(server, server.sign_in_url.removeprefix(server.url), signed_in=False).headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and server.token not in cookie
    driver = chromium()
    try:
        open_page(driver, server, "/")
        assert driver.current_url == server.url + "/sign-in" and driver.title.startswith("Sign in")
        driver.find_element(By.ID, "token").send_keys("not-the-token")
        driver.find_element(By.CSS_SELECTOR, "form.sign-in button").click()
        WebDriverWait(driver, WAIT).until(expected_conditions.presence_of_element_located((By.CSS_SELECTOR, ".error")))
        driver.find_element(By.ID, "token").send_keys(server.token)
        driver.find_element(By.CSS_SELECTOR, "form.sign-in button").click()
        WebDriverWait(driver, WAIT).until(expected_conditions.title_contains("Inbox"))
        assert driver.current_url == server.url + "/"
        assert driver.execute_script("return document.cookie") == ""  # HttpOnly: no script reads it
    finally:
        driver.quit()


def test_a_person_is_the_session_not_the_page(server: Server) -> None:
    """The same edit form: sent with the session cookie it is a person's edit and is saved as typed;
    sent with the bearer token it is a program's, and a credential in it is refused."""
    record_id = server.add("Deploy notes", "How we deploy.")
    planted = "ghp_" + "Q8w7E6r5T4y3U2i1O0p9A8s7D6f5"
    bearer = {"Authorization": f"Bearer {server.token}"}
    for credential, saved in ((bearer, False), ({}, True)):
        page = fetch(server, f"/records/{record_id}/edit", signed_in=not credential, headers=credential)
        found = re.findall(r'name="(csrf|etag|status_of)" value="([^"]*)"', page.body)
        fields = {name: html.unescape(value) for name, value in found}
        form = urllib.parse.urlencode({**fields, "title": "Deploy notes", "kind": "fact",
                                       "body": f"Deploy with {planted}."}).encode()  # fmt: skip
        answer = fetch(server, f"/records/{record_id}/edit", data=form, signed_in=not credential,
                       headers={**FORM, "Origin": server.url, **credential})  # fmt: skip
        assert (answer.status, planted in server.on_disk(record_id).body) == ((303, True) if saved else (422, False))
        if not saved:
            assert "credential-like material" in answer.body and planted in answer.body  # the draft is kept
