"""sandbox.client's session objects against a real server on the OCI backend: state kept
between runs, forks independent of their parent, the session deleted when its block ends."""

from __future__ import annotations

import asyncio
import base64

import pytest
import requests

from sandbox.client import AsyncSandboxClient, SandboxClient, SandboxSessionGone

pytestmark = pytest.mark.docker
TIMEOUT = 120


@pytest.fixture(scope="module")
def url(oci_server):
    return oci_server


def status_of(url: str, session_id: str) -> int:
    return requests.get(f"{url}/v1/sessions/{session_id}", timeout=TIMEOUT).status_code


def out(result) -> str:
    return result.run_result.stdout


def test_sync_session_keeps_state_and_is_deleted_on_exit(url):
    data = base64.b64encode(b"41").decode()
    with SandboxClient(url) as client:
        with client.session("python", files={"start.txt": data}) as session:
            assert session.files == {"start.txt": data}
            assert status_of(url, session.id) == 200
            first = session.run("x = int(open('start.txt').read())\nprint('set')")
            assert first.status == "Success" and out(first) == "set\n"
            second = session.run("print(x + 1, input())", "from stdin\n")
            assert out(second) == "42 from stdin\n"
            assert second.session_id == session.id and second.session_restarted is False
            state = session.state()
            assert state.executions == 2 and state.alive and state.stateful
        assert status_of(url, session.id) == 404
        with pytest.raises(Exception, match="closed"):
            session.run("print(x)")


def test_sync_fork_is_independent_and_owned_by_its_block(url):
    with SandboxClient(url) as client, client.session("python") as parent:
        parent.run("x = 1\nseen = ['parent']")
        with parent.fork() as child:
            assert child.id != parent.id and child.info["parent_id"] == parent.id
            assert out(child.run("print(x, seen)")) == "1 ['parent']\n"
            child.run("x = 2\nseen.append('child')")
            parent.run("seen.append('parent again')")
            assert out(parent.run("print(x, seen)")) == "1 ['parent', 'parent again']\n"
            assert out(child.run("print(x, seen)")) == "2 ['parent', 'child']\n"
        assert status_of(url, child.id) == 404  # the child's block deleted the child only
        assert status_of(url, parent.id) == 200
        assert out(parent.run("print(x)")) == "1\n"


def test_session_is_deleted_when_the_block_raises(url):
    with SandboxClient(url) as client:
        with pytest.raises(ZeroDivisionError):
            with client.session("python") as session:
                session.run("y = 1")
                1 / 0
        assert status_of(url, session.id) == 404


def test_a_session_deleted_elsewhere_raises_gone_and_the_block_still_ends_cleanly(url):
    with SandboxClient(url) as client:
        with client.session("python") as session:
            session.run("z = 1")
            assert requests.delete(f"{url}/v1/sessions/{session.id}",
                                   timeout=TIMEOUT).status_code == 204
            with pytest.raises(SandboxSessionGone, match="not found"):
                session.run("print(z)")
        assert session.closed  # the delete on exit met a 404: fine


def test_async_session_state_fork_and_deletion(url):
    async def main():
        async with AsyncSandboxClient(url) as client:
            async with client.session("python") as parent:
                await parent.run("import math\nr = math.floor(2.5)")
                assert out(await parent.run("print(r * 10)")) == "20\n"
                async with await parent.fork() as child:
                    await child.run("r = -1")
                    assert out(await child.run("print(r)")) == "-1\n"
                    assert out(await parent.run("print(r)")) == "2\n"
                    child_id = child.id
                    assert (await child.state()).forked_from == parent.id
                assert status_of(url, child_id) == 404
                assert (await parent.state()).executions == 3
            return parent.id

    parent_id = asyncio.run(main())
    assert status_of(url, parent_id) == 404


def test_async_sessions_run_side_by_side(url):
    ids = []

    async def one(client, n: int) -> str:
        async with client.session("python") as session:
            ids.append(session.id)
            await session.run(f"n = {n}")
            return out(await session.run("print(n * n)"))

    async def main():
        async with AsyncSandboxClient(url) as client:
            return await asyncio.gather(*(one(client, n) for n in range(3)))

    assert asyncio.run(main()) == ["0\n", "1\n", "4\n"]
    assert len(set(ids)) == 3 and [status_of(url, i) for i in ids] == [404] * 3
