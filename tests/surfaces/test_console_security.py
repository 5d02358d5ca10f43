"""The console answers only to its own names, and knows who decides.

DNS rebinding: a page on a domain the attacker re-binds to 127.0.0.1 is, to
the browser, same-origin with whatever listens there. Chromium, told to
resolve ``evil.test`` to 127.0.0.1, runs such a page (its document served by
Playwright, its requests going to the real console, as after a rebinding)
that reads the index, follows the agent's link, takes the CSRF value from the
form and posts the approval: every request is refused and the agent still
waits. The same script from the console's own origin does approve, so the
attack is real. Plain HTTP requests with forged ``Host`` and ``Origin``
headers are refused too.

Named operators: each has a token (stored as a scrypt hash) and a role; the
decision records the operator the token names, whatever the form says; a
read-only operator reads every page and changes nothing.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import anyio
import httpx
import pytest
from system_packages import ensure_debian_packages
from test_cli import _one_agent, durably
from test_console import CHROMIUM, CHROMIUM_ARGS, free_port

from durably import Runtime
from durably._console import create_app
from durably._console.operators import hash_token
from durably.errors import ConsoleConfigError

#: The attacker's script: index -> the agent's page -> its form -> POST, each step's status kept.
ATTACK = """<!doctype html><html><body><script>
(async () => {
  const steps = [];
  try {
    const index = await fetch("/", {credentials: "include"});
    const indexText = await index.text();
    steps.push("index " + index.status);
    const link = new DOMParser().parseFromString(indexText, "text/html").querySelector("a.agent-link");
    if (!link) throw new Error("no agent link");
    const agent = await fetch(link.getAttribute("href"), {credentials: "include"});
    const doc = new DOMParser().parseFromString(await agent.text(), "text/html");
    steps.push("agent " + agent.status);
    const form = doc.querySelector("form.decide");
    if (!form) throw new Error("no form");
    const body = new URLSearchParams(new FormData(form));
    body.set("action", "approve");
    const post = await fetch(form.getAttribute("action"), {method: "POST", body, credentials: "include"});
    steps.push("post " + post.status);
  } catch (e) {
    steps.push("stopped: " + e.message);
  }
  document.title = "done";
  document.body.dataset.steps = steps.join("; ");
})();
</script></body></html>"""


#: Chromium's own guard (Local/Private Network Access) blocks a page it deems public from reading a
#: loopback server; other browsers have none, so the console must refuse by itself: the test turns it off.
NO_LNA = (
    "--disable-features=LocalNetworkAccessChecks,BlockInsecurePrivateNetworkRequests,"
    "PrivateNetworkAccessSendPreflights,PrivateNetworkAccessRespectPreflightResults"
)


async def _status(url: str, agent_id: str) -> str:
    async with Runtime(url) as rt:
        return (await rt.describe(agent_id)).status


def _shown_status(url: str, agent_id: str) -> str:
    """The status ``durably show --json`` prints (a process of its own: Playwright's loop runs here)."""
    shown = durably("show", agent_id, "--store", url, "--json")
    assert shown.returncode == 0, shown.stdout + shown.stderr
    return str(json.loads(shown.stdout)["status"])


def _serve_console(url: str, port: int, *extra: str) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-m", "durably._cli", "ui", "--store", url, "--port", str(port), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/", timeout=2).status_code == 200:
                return proc
        except httpx.TransportError:
            pass
        assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
        assert time.monotonic() < deadline, "the console did not come up"
        time.sleep(0.2)


def test_a_rebound_domain_can_neither_read_nor_approve_in_chromium(tmp_path) -> None:
    ensure_debian_packages("chromium")
    from playwright.sync_api import sync_playwright

    url = f"sqlite:///{tmp_path / 'a.db'}"
    anyio.run(_one_agent, url, "gated")
    port = free_port()
    console = _serve_console(url, port)
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(
                executable_path=CHROMIUM, args=[*CHROMIUM_ARGS, "--host-resolver-rules=MAP evil.test 127.0.0.1", NO_LNA]
            )

            def attack_from(origin: str) -> str:
                page = browser.new_page()
                page.route(f"{origin}/attack", lambda route: route.fulfill(body=ATTACK, content_type="text/html"))
                page.goto(f"{origin}/attack")
                page.wait_for_function("document.title === 'done'", timeout=30_000)
                steps = page.evaluate("document.body.dataset.steps")
                page.close()
                return steps

            rebound = attack_from(f"http://evil.test:{port}")
            assert rebound.startswith("index 400"), rebound  # the console does not answer to evil.test
            assert "post" not in rebound, rebound
            assert _shown_status(url, "gated") == "waiting_approval"

            own = attack_from(f"http://127.0.0.1:{port}")  # the same script, from the console's own origin
            assert own == "index 200; agent 200; post 200", own  # 303 to the agent's page, followed
            browser.close()
        assert _shown_status(url, "gated") == "running"
    finally:
        console.terminate()
        console.wait(timeout=20)


async def test_forged_host_and_origin_headers_are_refused(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'a.db'}"
    await _one_agent(url, "gated")
    app = create_app(url, port=8421, allowed_hosts=["console.example", "proxy.example:8443"])
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8421") as client:
            for host in ("evil.test", "evil.test:8421", "127.0.0.1:9999", "127.0.0.1", "localhost.evil.test:8421"):
                assert (await client.get("/", headers={"host": host})).status_code == 400, host
            for host in ("127.0.0.1:8421", "localhost:8421", "[::1]:8421", "console.example", "proxy.example:8443"):
                assert (await client.get("/", headers={"host": host})).status_code == 200, host
            for host in ("proxy.example", "console.example?x", "console.example/x", "a@console.example"):
                assert (await client.get("/", headers={"host": host})).status_code == 400, host

            page = await client.get("/agent?id=gated")
            csrf = client.cookies["durably_csrf"]
            assert page.status_code == 200 and csrf in page.text
            form = {"agent_q": "gated", "approval_q": "c1", "action": "approve", "csrf": csrf}
            # A forged Host with a matching Origin: the check that compared the two is gone.
            forged = await client.post(
                "/decide", data=form, headers={"host": "evil.test:8421", "origin": "http://evil.test:8421"}
            )
            assert forged.status_code == 400
            for origin in ("http://evil.test:8421", "null", "http://127.0.0.1:9999", "https://console.example.evil"):
                refused = await client.post("/decide", data=form, headers={"origin": origin})
                assert refused.status_code == 403, origin
            assert (await _status(url, "gated")) == "waiting_approval"
            ours = await client.post("/decide", data=form, headers={"origin": "http://localhost:8421"})
            assert ours.status_code == 303 and "approved" in ours.headers["location"]
        # A WebSocket (the console has none) never reaches the routes, whatever its Host.
        sent: list[dict] = []

        async def receive() -> dict:
            return {"type": "websocket.connect"}

        async def send(message: dict) -> None:
            sent.append(message)

        scope = {"type": "websocket", "path": "/", "headers": [(b"host", b"evil.test")], "query_string": b""}
        await app(scope, receive, send)
        assert sent == [{"type": "websocket.close", "code": 1008}]
    assert (await _status(url, "gated")) == "running"
    with pytest.raises(ConsoleConfigError):
        create_app(url, allowed_hosts=["user@evil.test"])


def _operators_file(tmp_path, entries: list[tuple[str, str, str]]) -> str:
    path = tmp_path / "operators.toml"
    path.write_text(
        "".join(
            f'[[operator]]\nname = "{name}"\nrole = "{role}"\ntoken_hash = "{token_hash}"\n\n'
            for name, role, token_hash in entries
        )
    )
    return str(path)


ALICE, BOB = "alice-" + "a" * 24, "bob-" + "b" * 24


async def test_named_operators_decide_as_themselves_and_read_only_changes_nothing(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'a.db'}"
    await _one_agent(url, "gated")
    await _one_agent(url, "second")
    operators = _operators_file(
        tmp_path, [("alice", "approver", hash_token(ALICE)), ("bob", "read-only", hash_token(BOB))]
    )
    app = create_app(url, operators=operators, host="0.0.0.0", allowed_hosts=["console"])
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)

        def client(token: str | None) -> httpx.AsyncClient:
            headers = {"authorization": f"Bearer {token}"} if token else {}
            return httpx.AsyncClient(transport=transport, base_url="http://console", headers=headers)

        async with client(None) as anonymous:
            assert (await anonymous.get("/")).status_code == 401
        async with client("x" * 30) as stranger:
            assert (await stranger.get("/")).status_code == 401
        async with client(BOB) as bob:
            page = await bob.get("/agent?id=gated")
            assert page.status_code == 200 and "bob (read-only)" in page.text
            assert "Approve" not in page.text and "read-only operator" in page.text
            form = {"agent_q": "gated", "approval_q": "c1", "action": "approve", "csrf": bob.cookies["durably_csrf"]}
            assert (await bob.post("/decide", data=form)).status_code == 403
        assert (await _status(url, "gated")) == "waiting_approval"
        async with client(ALICE) as alice:
            page = await alice.get("/agent?id=gated")
            assert "Approve" in page.text and 'name="by"' not in page.text
            form = {
                "agent_q": "gated",
                "approval_q": "c1",
                "action": "approve",
                "by": "mallory",  # a typed name is not who decided
                "csrf": alice.cookies["durably_csrf"],
            }
            assert (await alice.post("/decide", data=form)).status_code == 303
            # The cookie login works the same way as the header.
            async with client(None) as browser:
                login = await browser.get(f"/agent?id=second&token={ALICE}")
                assert login.status_code == 303 and login.headers["location"] == "/agent?id=second"
                assert "alice (approver)" in (await browser.get(login.headers["location"])).text
    async with Runtime(url) as rt:
        decided = (await rt.status("gated")).approvals["c1"]["decision"]
    assert decided["by"] == "console: alice"


async def test_the_single_token_is_one_unnamed_operator(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'a.db'}"
    await _one_agent(url, "gated")
    token = "t" * 24
    app = create_app(url, token=token, allowed_hosts=["console"])
    async with app.router.lifespan_context(app):
        headers = {"authorization": f"Bearer {token}"}
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://console", headers=headers) as client:
            await client.get("/")
            form = {"agent_q": "gated", "approval_q": "c1", "action": "approve", "csrf": client.cookies["durably_csrf"]}
            assert (await client.post("/decide", data=form)).status_code == 303
    async with Runtime(url) as rt:
        assert (await rt.status("gated")).approvals["c1"]["decision"]["by"] == "console: token holder"


def test_bad_operators_files_are_refused_with_the_reason(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'a.db'}"
    anyio.run(_one_agent, url, "gated")
    good = hash_token(ALICE)
    cases = {
        "role 'admin'": [("alice", "admin", good)],
        "named twice": [("alice", "approver", good), ("alice", "read-only", good)],
        "not scrypt": [("alice", "approver", "sha256$abc")],
        "cost out of range": [("alice", "approver", good.replace("$16384$", "$1024$"))],
    }
    for reason, entries in cases.items():
        with pytest.raises(ConsoleConfigError, match=reason):
            create_app(url, operators=_operators_file(tmp_path, entries))
    with pytest.raises(ConsoleConfigError, match="cannot read"):
        create_app(url, operators=str(tmp_path / "missing.toml"))
    with pytest.raises(ConsoleConfigError, match="at least 16"):
        hash_token("short")
    # The command line prints a hash the file takes, and refuses a short token.
    printed = subprocess.run(
        [sys.executable, "-m", "durably._cli", "ui", "--hash-token"], input=ALICE + "\n", capture_output=True, text=True
    )
    assert printed.returncode == 0 and printed.stdout.startswith("scrypt$16384$8$1$")
    create_app(url, operators=_operators_file(tmp_path, [("alice", "approver", printed.stdout.strip())]))
    short = durably("ui", "--hash-token", input="short\n")
    assert short.returncode == 1 and "at least 16" in short.stderr
