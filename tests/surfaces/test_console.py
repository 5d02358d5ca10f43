"""The web console in a real browser (Playwright driving Debian's chromium) on a store with a demo run.

The console runs as ``durably ui`` in its own process, a ``serve()`` worker in
another; the browser lists the agents, reads the demo agent's timeline (the
crash and the resume are marked), opens a state at a seq, and approves a
parked agent, which the worker then finishes. Screenshots of every page are
saved under the test's tmp dir. The security rules (token, CSRF, content) are
checked over HTTP as well.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from system_packages import ensure_debian_packages

from durably._console import ContentPolicy, create_app
from durably.errors import ConsoleConfigError

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
DEMO_AGENT = "stdlib-survey-11"
PARKED = "parked-survey"
SUPPORT = Path(__file__).resolve().parents[1] / "support"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run(argv: list[str], **kw) -> subprocess.CompletedProcess:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, **kw)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


@pytest.fixture(scope="module")
def demo_store(tmp_path_factory) -> dict:
    """The demo's finished agent (crashed and resumed) and a survey parked on its approval."""
    work = tmp_path_factory.mktemp("console")
    url = f"sqlite:///{work / 'demo.db'}"
    run([sys.executable, "-m", "durably._cli", "demo", "--modules", "3", "--seed", "11", "--store", url], cwd=work)
    run(
        [
            sys.executable,
            "-m",
            "durably._cli.demo.worker",
            "--store",
            url,
            "--namespace",
            "demo",
            "--agent-id",
            PARKED,
            "--workdir",
            str(work / "parked"),
            "--modules",
            "colorsys,bisect",
        ]
    )
    return {"url": url, "work": work}


@pytest.fixture
def console(demo_store):
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "durably._cli",
            "ui",
            "--store",
            demo_store["url"],
            "--namespace",
            "demo",
            "--port",
            str(port),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(base + "/", timeout=2).status_code == 200:
                break
        except httpx.TransportError:
            pass
        assert proc.poll() is None, proc.stdout.read()
        assert time.monotonic() < deadline, "the console did not come up"
        time.sleep(0.2)
    yield base
    proc.terminate()
    proc.wait(timeout=20)


def test_the_console_in_a_browser_lists_shows_and_approves(demo_store, console, tmp_path) -> None:
    ensure_debian_packages("chromium")
    from playwright.sync_api import sync_playwright

    worker = subprocess.Popen(
        [
            sys.executable,
            str(SUPPORT / "console_serve_worker.py"),
            "--store",
            demo_store["url"],
            "--workdir",
            str(demo_store["work"] / "parked"),
            "--until",
            PARKED,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.goto(console + "/")
            rows = page.locator("table.agents tbody tr")
            assert rows.count() == 2
            assert page.locator("a.agent-link", has_text=DEMO_AGENT).is_visible()
            assert page.locator("a.agent-link", has_text=PARKED).is_visible()
            assert "waiting_approval" in page.inner_text("table.agents") and "finished" in page.inner_text(
                "table.agents"
            )
            page.screenshot(path=tmp_path / "agents.png", full_page=True)

            page.click(f"a.agent-link:has-text('{DEMO_AGENT}')")
            page.wait_for_selector("table.timeline")
            assert page.locator("tr.mark-crash .tag.crash").count() >= 1  # worker 1 was SIGKILLed mid-run
            assert page.locator("tr.mark-resume .tag.resume").count() >= 1  # worker 3 resumed after the approval
            assert page.locator("tr.row-call").count() >= 9  # 3 tools x 3 modules, each paired with its result
            assert "finished" in page.inner_text("#agent-status")
            assert page.locator("pre.result").is_visible() and "content hidden" in page.inner_text("header")
            page.screenshot(path=tmp_path / "timeline.png", full_page=True)

            page.click("table.timeline tbody tr:nth-child(5) a")
            page.wait_for_selector("pre.state")
            assert "at seq" in page.inner_text("h1") and "text, " in page.inner_text("pre.state")  # sizes, not content
            page.screenshot(path=tmp_path / "state.png", full_page=True)

            page.goto(console + f"/agent?id={PARKED}")
            assert "waiting_approval" in page.inner_text("#agent-status")
            assert page.locator("section.approval pre.args").inner_text().strip() not in ("", "null")  # shown
            page.click("section.approval button.approve")
            page.wait_for_selector("p.notice")
            assert "approved" in page.inner_text("p.notice")
            page.screenshot(path=tmp_path / "approved.png", full_page=True)

            out, err = worker.communicate(timeout=120)  # the serve() in the other process finishes the agent
            assert worker.returncode == 0, err[-3000:]
            assert json.loads(out.strip().splitlines()[-1])["status"] == "finished"
            page.reload()
            assert "finished" in page.inner_text("#agent-status")
            assert "approved by console: anonymous (no login)" in page.inner_text("table.timeline")
            page.screenshot(path=tmp_path / "finished.png", full_page=True)
            browser.close()
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    for name in ("agents", "timeline", "state", "approved", "finished"):
        assert (tmp_path / f"{name}.png").stat().st_size > 10_000, name


def test_state_changes_need_the_pages_csrf_token(demo_store, console) -> None:
    url = f"{console}/decide"
    target = {"agent_q": PARKED, "approval_q": "nope", "action": "approve"}
    assert httpx.post(url, data=target).status_code == 403  # no CSRF cookie: not from our page
    with httpx.Client(base_url=console) as client:
        page = client.get(f"/agent?id={DEMO_AGENT}")
        assert page.status_code == 200 and "content-security-policy" in page.headers
        assert (
            "script" not in page.headers["content-security-policy"]
            or "'none'" in page.headers["content-security-policy"]
        )
        assert client.post(url, data={**target, "csrf": "forged"}).status_code == 403
        cross = client.post(
            url,
            data={**target, "csrf": client.cookies["durably_csrf"]},
            headers={"origin": "http://evil.example"},
        )
        assert cross.status_code == 403
        ours = client.post(url, data={**target, "csrf": client.cookies["durably_csrf"]})
        assert ours.status_code == 303 and "refused" in ours.headers["location"]  # no such approval: refused, typed


async def test_a_token_guards_every_request_and_other_hosts_need_one(demo_store) -> None:
    with pytest.raises(ConsoleConfigError):
        create_app(demo_store["url"], host="0.0.0.0")
    with pytest.raises(ConsoleConfigError):
        create_app(demo_store["url"], token="short")
    token = "t" * 24
    app = create_app(demo_store["url"], namespace="demo", token=token, host="0.0.0.0", allowed_hosts=["console"])
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://console") as client:
            assert (await client.get("/")).status_code == 401
            assert (await client.get("/?token=wrong")).status_code == 401
            login = await client.get(f"/agent?id={DEMO_AGENT}&token={token}")
            assert login.status_code == 303 and login.headers["location"] == f"/agent?id={DEMO_AGENT}"
            assert (await client.get(login.headers["location"])).status_code == 200  # the cookie carries it now
        async with httpx.AsyncClient(
            transport=transport, base_url="http://console", headers={"authorization": f"Bearer {token}"}
        ) as client:
            assert (await client.get("/")).status_code == 200


async def test_record_content_reaches_the_page_only_when_allowed(demo_store) -> None:
    task_words = "Survey these Python standard-library modules"
    for show in (False, True):
        app = create_app(
            demo_store["url"], namespace="demo", content=ContentPolicy(show=show), allowed_hosts=["console"]
        )
        async with app.router.lifespan_context(app):
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://console") as client:
                timeline = (await client.get(f"/agent?id={DEMO_AGENT}")).text
                state = (await client.get(f"/state?agent={DEMO_AGENT}&seq=3")).text
        assert (task_words in timeline) is show and (task_words in state) is show
        assert ("<th>content</th>" in timeline) is show  # the browser test sees approval arguments hidden


async def test_a_long_timeline_is_paged(tmp_path) -> None:
    from durably import Runtime
    from durably.schemas._records import Kind, Record

    url = f"sqlite:///{tmp_path / 'long.db'}"
    async with Runtime(url) as rt:
        stream = rt.stream("long")
        start = {
            "namespace": "default",
            "agent_id": "long",
            "run_id": "r" * 32,
            "task": "t",
            "definition": {"name": "d", "version": "1", "digest": "0" * 16},
            "instructions": "",
            "budget": {"steps": None, "tokens": None, "cost_usd": None},
            "worker": "w",
        }
        frames = [rt.codec.encode_record(Record(1, Kind.STARTED, start, 1.0), stream)]
        frames += [
            rt.codec.encode_record(Record(seq, Kind.MESSAGE_RECEIVED, {"role": "user", "content": "hi"}, 1.0), stream)
            for seq in range(2, 1201)
        ]
        await rt.store.append(stream, 0, frames)
    app = create_app(url, allowed_hosts=["console"])
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://console") as client:
            latest = (await client.get("/agent?id=long")).text
            first = (await client.get("/agent?id=long&after=0")).text
    assert latest.count('<tr class="row-') == 500 and ">1200<" in latest and "earlier records" in latest
    assert "after=200" in latest  # the page before this one: records 201..700
    assert first.count('<tr class="row-') == 500 and ">1<" in first and ">501<" not in first
    assert "later records" in first and "after=500" in first


async def test_untrusted_text_is_neutralised_on_every_page(tmp_path) -> None:
    from test_cli import HOSTILE, _one_agent

    url = f"sqlite:///{tmp_path / 'a.db'}"
    await _one_agent(url, "victim", safe=False)
    # content shown: the hostile text reaches the page
    app = create_app(url, content=ContentPolicy(show=True), allowed_hosts=["console"])
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://console") as client:
            pages = [
                await client.get(path)
                for path in ("/", "/agent?id=victim", "/state?agent=victim", "/state?agent=victim&seq=2")
            ]
    for page in pages:
        assert page.status_code == 200
        for raw in ("\x1b", "\x07", "\x9b", "\u202e"):
            assert raw not in page.text, (page.url, repr(raw))
    assert "\\x1b]52;c;" in pages[1].text and "\\u202eevil" in pages[1].text  # shown, as escapes
    assert HOSTILE not in pages[1].text


def test_neutralise_escapes_controls_bidi_and_separators_only() -> None:
    from durably._cli.output import neutralise

    assert neutralise("plain text, ünïcode ✓ 漢字") == "plain text, ünïcode ✓ 漢字"
    assert neutralise("a\x1b[2Kb\x07c\x9bd\x7f") == "a\\x1b[2Kb\\x07c\\x9bd\\x7f"
    assert neutralise("x\u202ey\u2066z\u200bw\u2028") == "x\\u202ey\\u2066z\\u200bw\\u2028"
    assert neutralise("one\ntwo\tthree") == "one\\x0atwo\\x09three"
    assert neutralise("one\ntwo", newlines=True) == "one\ntwo"
    assert neutralise(42) == "42" and neutralise("\ud800") == "\\ud800"
