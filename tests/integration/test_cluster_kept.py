"""Listing, deleting and retention on a real 3-master Redis Cluster: the indexes are sharded 64 ways, a page reads
every shard in one pipeline, and a deletion is one script on the unit's slot. Every master is scanned after."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tasks.client import Busy
from tasks.store import keys
from tests.conftest import Stack
from tests.integration.test_kept import leftovers
from tests.support.fake_anthropic import FakeMessagesServer, Script, text, tool_call
from tests.support.processes import RedisServer, wait_until
from tests.support.redis_cluster import PrivateCluster, find_cluster_binaries

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("cluster")]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateCluster]:
    if find_cluster_binaries() is None:
        pytest.skip("no Redis 7 redis-server and redis-cli (Debian: apt-get install redis-server; .ci/run does)")
    with PrivateCluster(tmp_path_factory.mktemp("cluster"), masters=3) as started:
        yield started


@pytest.fixture(autouse=True)
def _plain_layout_after() -> Iterator[None]:
    yield
    keys.use_cluster(False)


@pytest.fixture
def cstack(cluster: PrivateCluster, redis_server: RedisServer, fake_api: FakeMessagesServer,
           tmp_path: Path) -> Iterator[Stack]:
    s = Stack(redis_server, fake_api, tmp_path)
    s.env.update({
        "BATON_REDIS_CLUSTER": cluster.startup_nodes,
        "BATON_REDIS_URL": f"redis://127.0.0.1:{cluster.masters()[0].port}/0",
        "BATON_BROKER_URL": redis_server.url,
        "BATON_TEST_COUNTER_URL": redis_server.url,
    })
    yield s
    s.stop()


def everywhere(cluster: PrivateCluster, ident: str) -> list[str]:
    """`leftovers` on every master of the cluster."""
    return [f for m in cluster.masters() for f in leftovers(redis.Redis(port=m.port), ident)]


def test_listing_deleting_and_retention_on_a_cluster(cluster, cstack, tmp_path):
    cstack.fake_api.set_handler(Script(
        [text(f"answer {i}.") for i in range(6)] + [tool_call("deploy", {"env": "prod"}, id="toolu_deploy")]
        + [text("run done.")]
    ))
    cstack.worker(BATON_RETENTION="4", BATON_LEASE_TTL="4")
    c = cstack.client()
    chats = [f"kc-{i}" for i in range(6)]
    for i, chat in enumerate(chats):
        c.wait(c.send_message(chat, f"hello {i}", user="ann" if i % 2 else "ben"), timeout=30)
    assert len({keys.shard(keys.owner("chat", chat)) for chat in chats}) > 1  # spread over shards
    ids, before = [], None
    while True:
        page = c.chats(limit=4, before=before)
        ids += [i["id"] for i in page.items]
        if page.next is None:
            break
        before = page.next
    assert ids == chats[::-1]
    assert [i["id"] for i in c.chats(user="ann").items] == ["kc-5", "kc-3", "kc-1"]

    parked = c.wait(c.send_message("kc-park", "deploy", user="ann"), timeout=30)
    assert parked.status == "waiting"
    assert c.wait(c.start_run("a run", tmp_path, run_id="kr-1", user="ann"), timeout=30).status == "completed"
    assert [i["id"] for i in c.runs(user="ann").items] == ["kr-1"]

    assert c.delete("kc-0") == {"id": "kc-0", "deleted": True} and everywhere(cluster, "kc-0") == []
    assert c.delete("kr-1") == {"id": "kr-1", "deleted": True} and everywhere(cluster, "kr-1") == []
    with pytest.raises(Busy):
        c.delete("kc-park")
    assert c.delete("kc-park", stop=True) == {"id": "kc-park", "deleted": True}
    assert everywhere(cluster, "kc-park") == []
    assert c.delete("kc-never") == {"id": "kc-never", "deleted": False}
    # Retention (4 s) takes the rest, shard by shard.
    wait_until(lambda: not any(everywhere(cluster, chat) for chat in chats), 30, interval=0.5,
               what="retention to delete every idle chat on every shard")
    assert c.chats().items == []
