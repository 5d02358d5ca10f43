"""What the console's pages show and accept, on agents made for each case.

Agent ids may hold ``/``: each agent's link opens that agent, whatever its id
ends with. "It happened" takes the JSON the CLI takes and refuses what it
refuses, with a 400. An approver sees the arguments of the call they approve
(secrets masked). A cancelled agent offers no decision, in the console and in
``durably show --json``. A retried agent reads as retried, not crashed. A
finished agent's result is on its page and in ``durably show``.
"""

from __future__ import annotations

import json
import re

import httpx
from privacy_support import ScriptModel
from test_cli import HOSTILE, _eight_calls, _one_agent, durably

from durably import AgentDefinition, ModelResponse, RetryPolicy, Runtime, ToolCall, TransientModelError, Usage, tool
from durably._console import ContentPolicy, create_app

SECRET = "sk-live-" + "q" * 32


async def _get(url: str, *paths: str, content: ContentPolicy | None = None) -> list[httpx.Response]:
    app = create_app(url, content=content, allowed_hosts=["console"])
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://console") as client:
            return [await client.get(path) for path in paths]


def _links(page: str, css_class: str = "agent-link") -> dict[str, str]:
    """Link text -> href of the page's ``<a class=css_class>`` links."""
    found = re.findall(rf'<a class="{css_class}" href="([^"]+)">([^<]*)</a>', page)
    return {text: href.replace("&amp;", "&") for href, text in found}


def _wire_money():
    @tool(name="wire_money", requires_approval=True)
    async def wire_money(amount: float, to: str, api_key: str, *, ctx) -> str:
        return f"sent {amount} to {to}"

    return wire_money


async def _parked_payment(url: str, agent_id: str) -> None:
    call = ToolCall("pay-1", "wire_money", {"amount": 12345.67, "to": "acct-9", "api_key": SECRET})
    model = ScriptModel([ModelResponse("paying", (call,), Usage(1, 1, 0.0))])
    definition = AgentDefinition(name="payer", model=model, tools=[_wire_money()])
    async with Runtime(url, agents=[definition]) as rt:
        assert (await rt.run(definition, agent_id, "pay the invoice")).status == "waiting_approval"


async def test_an_agent_whose_id_ends_in_state_opens_its_own_page(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'a.db'}"
    for agent_id in ("x", "x/state", "x/approvals/c1"):
        await _one_agent(url, agent_id)
    (index,) = await _get(url, "/")
    links = _links(index.text)
    assert set(links) == {"x", "x/state", "x/approvals/c1"}
    opened = await _get(url, *links.values())
    for (agent_id, _), page in zip(links.items(), opened, strict=True):
        assert page.status_code == 200, agent_id
        assert re.search(rf"<h1>{re.escape(agent_id)} <span", page.text), agent_id  # its page, not another's
    # Its state link, too, names it.
    (state_link,) = re.findall(r'<dt>state</dt><dd><a href="([^"]+)"', opened[list(links).index("x/state")].text)
    (state,) = await _get(url, state_link.replace("&amp;", "&"))
    assert state.status_code == 200 and "<h1>x/state at seq" in state.text
    # Ids the store refuses, and seqs out of any range, are the request's fault, not the console's.
    odd = await _get(
        url,
        "/agent",
        "/agent?id=%00",
        "/agent?id=x&after=99999999999999999999999",
        "/agent?id=x&after=\u00b2",
        "/state?agent=x&seq=-1",
    )
    assert [page.status_code for page in odd] == [400, 400, 200, 200, 400]


async def test_an_approval_whose_id_holds_control_characters_is_decided_from_its_form(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'a.db'}"
    await _one_agent(url, "victim/x", safe=False)  # its approval id is HOSTILE: escapes, a bidi override
    app = create_app(url, allowed_hosts=["console"])
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://console") as client:
            page = (await client.get("/agent?id=victim%2Fx")).text
            form = page[page.index('<form method="post" action="/decide"') :]
            fields = dict(
                re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)">', form[: form.index("</form>")])
            )
            assert set(fields) == {"csrf", "agent_q", "approval_q"} and "\x1b" not in page
            decided = await client.post("/decide", data={**fields, "action": "approve"})
            assert decided.status_code == 303 and "approved" in decided.headers["location"]
    async with Runtime(url) as rt:
        assert (await rt.status("victim/x")).approvals[HOSTILE]["decision"]["approved"] is True


async def test_it_happened_refuses_what_the_cli_refuses_with_a_400(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'a.db'}"
    await _one_agent(url, "gated")
    deep = "[" * 20_000 + "]" * 20_000
    app = create_app(url, allowed_hosts=["console"])
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://console") as client:
            page = await client.get("/agent?id=gated")
            assert "It happened" in page.text
            form = {
                "agent_q": "gated",
                "approval_q": "c1",
                "action": "happened",
                "csrf": client.cookies["durably_csrf"],
            }
            for result, reason in ((deep, "nests deeper"), ("NaN", "NaN"), ('{"a": -Infinity}', "Infinity")):
                answer = await client.post("/decide", data={**form, "result": result})
                assert answer.status_code == 400 and reason in answer.text, result[:20]
            assert (await client.post("/decide", data={**form, "result": "{nope"})).status_code == 400
            async with Runtime(url) as rt:
                assert (await rt.status("gated")).status == "waiting_approval"  # nothing was recorded
            approve = await client.post("/decide", data={**form, "action": "approve"})
            assert approve.status_code == 303 and "approved" in approve.headers["location"]
    # The command line refuses the same answers with the same words.
    await _one_agent(url, "gated-2")
    for result, reason in ((deep, "nests deeper"), ("NaN", "NaN")):
        proc = durably("approve", "gated-2", "c1", "--store", url, "--happened", "--result", result)
        assert proc.returncode == 1 and reason in proc.stdout and "Traceback" not in proc.stderr, proc.stderr[-500:]


async def test_the_approval_box_shows_the_arguments_with_secrets_masked(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'a.db'}"
    await _parked_payment(url, "payer")
    (page,) = await _get(url, "/agent?id=payer")  # the default: content hidden elsewhere
    box = page.text[page.text.index('<section class="approval">') :]
    box = box[: box.index("</section>")]
    assert "12345.67" in box and "acct-9" in box and "api_key" in box
    assert SECRET not in page.text
    assert "content hidden" in page.text  # the rest of the content stays hidden


async def test_a_cancelled_agent_offers_no_decisions(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'a.db'}"
    await _parked_payment(url, "payer")
    async with Runtime(url) as rt:
        await rt.cancel("payer", "no longer needed")
    (page,) = await _get(url, "/agent?id=payer")
    assert "cancelled" in page.text
    for offer in ("Approve", "Deny", "It happened", "Open approvals", 'action="/decide"'):
        assert offer not in page.text, offer
    shown = durably("show", "payer", "--store", url, "--json")
    assert shown.returncode == 0, shown.stderr
    described = json.loads(shown.stdout)
    assert described["status"] == "cancelled"
    assert described["open_approvals"] == [] and described["pending_calls"] == []
    listed = durably("agents", "--store", url, "--json")
    assert json.loads(listed.stdout)["agents"][0]["open_approvals"] == []


class _Switchable:
    """Unreachable until ``fixed``; then finishes with ``RESULT``."""

    name = "switchable"

    def __init__(self) -> None:
        self.fixed = False

    async def respond(self, messages, tools):
        if not self.fixed:
            raise TransientModelError("down", status=503)
        return ModelResponse(RESULT)


RESULT = "the answer is 42"


async def test_a_retry_reads_as_a_retry_and_the_result_is_shown(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'a.db'}"
    model = _Switchable()
    definition = AgentDefinition(
        name="s", model=model, retry=RetryPolicy(initial_s=0.01, max_s=0.02, jitter_s=0.0, attempts=2)
    )
    async with Runtime(url, agents=[definition]) as rt:
        assert (await rt.run("s", "flaky", "task")).status == "failed"
    model.fixed = True
    async with Runtime(url, agents=[definition]) as rt:
        assert (await (await rt.retry("flaky")).wait()).status == "finished"
    (hidden,) = await _get(url, "/agent?id=flaky")
    (shown,) = await _get(url, "/agent?id=flaky", content=ContentPolicy(show=True))
    for page in (hidden, shown):
        assert "mark-retry" in page.text and "retried by an operator" in page.text
        assert "mark-crash" not in page.text and "stopped mid-run" not in page.text
    assert RESULT not in hidden.text and f"text, {len(RESULT)} characters" in hidden.text
    assert re.search(rf'<pre class="result">[^<]*{RESULT}', shown.text)
    text = durably("show", "flaky", "--store", url)
    assert text.returncode == 0 and re.search(rf"^result:\s+{RESULT}$", text.stdout, re.M), text.stdout
    described = json.loads(durably("show", "flaky", "--store", url, "--json").stdout)
    assert described["result"] == RESULT


async def test_a_function_agent_shows_its_calls_where_a_model_agent_shows_steps(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'a.db'}"
    await _eight_calls(url)  # a function agent: eight journaled calls, no model step
    await _parked_payment(url, "payer-1")  # a model agent: one model step
    index, fn, payer = await _get(url, "/", "/agent?id=fn-1", "/agent?id=payer-1")
    cells = {
        agent_id: re.findall(r'<td class="num">([^<]*)</td>', row)
        for agent_id, row in re.findall(r'class="agent-link"[^>]*>([^<]*)</a>(.*?)</tr>', index.text, re.S)
    }
    assert cells["fn-1"][1] == "8 calls (8 done)" and cells["payer-1"][1] == "1", cells  # as durably agents says
    assert re.search(r"<dt>seq / calls</dt><dd>\d+ / 8 \(8 done\)</dd>", fn.text), fn.text  # as durably show says
    assert "<dt>seq / steps</dt>" not in fn.text
    assert re.search(r"<dt>seq / steps</dt><dd>\d+ / 1</dd>", payer.text), payer.text
