"""The command line on partitioned queues: ``vsqs create --partitions N [--fifo]``,
``vsqs config`` (fifo shown and set, partitions refused), ``vsqs publish --group``,
``vsqs stats`` per partition (table and JSON)."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner, Result

import vsqs
from vsqs.cli import cli


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def test_create_stores_the_partition_count_and_fifo(tmp_path: Path) -> None:
    orders, plain = str(tmp_path / "orders"), str(tmp_path / "plain")
    made = run("create", orders, "--partitions", "4", "--fifo")
    assert made.exit_code == 0, made.output
    assert made.stdout == f"{orders}  (partitions=4, fifo)\n"
    queue = vsqs.Queue(orders)
    assert isinstance(queue, vsqs.PartitionedQueue)
    assert (queue.partitions, queue.fifo) == (4, True)
    assert run("create", plain).stdout == f"{plain}\n"
    assert len(vsqs.partitions_of(vsqs.Queue(plain))) == 1
    again = run("create", orders)  # opened as it is
    assert (again.exit_code, again.stdout) == (0, f"{orders}  (partitions=4, fifo)\n")
    fifo_only = run("create", str(tmp_path / "f"), "--fifo")
    assert fifo_only.stdout.endswith("(partitions=8, fifo)\n")  # FIFO_PARTITIONS


def test_create_refuses_another_count_naming_both(tmp_path: Path) -> None:
    orders = str(tmp_path / "orders")
    run("create", orders, "--partitions", "4")
    refused = run("create", orders, "--partitions", "2")
    assert refused.exit_code == 2
    assert "partitions=4" in refused.output and "partitions=2" in refused.output
    assert vsqs.PartitionedQueue(orders).partitions == 4
    bad = run("create", str(tmp_path / "x"), "--partitions", "0")
    assert bad.exit_code == 2 and not (tmp_path / "x").exists()


def test_queues_create_takes_partitions_and_fifo(tmp_path: Path) -> None:
    root = str(tmp_path / "root")
    made = run("queues", "--root", root, "create", "a", "b", "--partitions", "2", "--fifo")
    assert made.exit_code == 0, made.output
    assert made.stdout.splitlines() == [
        f"{root}/a  (partitions=2, fifo)", f"{root}/b  (partitions=2, fifo)",
    ]  # fmt: skip
    assert len(vsqs.partitions_of(vsqs.QueueRoot(root).get("a"))) == 2
    refused = run("queues", "--root", root, "create", "a", "--partitions", "3")
    assert refused.exit_code == 2 and "partitions=2" in refused.output


def test_config_shows_and_sets_fifo_and_refuses_partitions(tmp_path: Path) -> None:
    orders = str(tmp_path / "orders")
    vsqs.PartitionedQueue(orders, partitions=3)
    shown = run("config", orders)
    assert "fifo                false  (default)\n" in shown.stdout
    assert "partitions          3\n" in shown.stdout
    on = run("config", orders, "--fifo", "--json")
    assert on.exit_code == 0, on.output
    assert json.loads(on.stdout) == {"fifo": True, "partitions": 3}
    queue = vsqs.PartitionedQueue(orders)
    assert queue.fifo and all(part.fifo for part in queue.partition_queues)
    off = run("config", orders, "--no-fifo")
    assert "fifo                false\n" in off.stdout
    assert not any(part.fifo for part in vsqs.partitions_of(vsqs.Queue(orders)))
    refused = run("config", orders, "--partitions", "6")
    assert refused.exit_code == 2
    assert "fixed when a queue is created" in refused.output and "redrive" in refused.output
    assert vsqs.PartitionedQueue(orders).partitions == 3
    unset = run("config", orders, "--unset", "fifo", "--json")
    assert json.loads(unset.stdout) == {"partitions": 3}


def test_publish_group_keeps_a_group_in_its_partition_in_order(tmp_path: Path) -> None:
    orders = str(tmp_path / "orders")
    vsqs.PartitionedQueue(orders, partitions=4)
    for n in range(3):
        assert run("publish", orders, "--group", "customer-42", f"a{n}", f"b{n}").exit_code == 0
    queue = vsqs.PartitionedQueue(orders)
    home = queue.partition_for("customer-42")
    assert [m.body for m in home.browse()] == [b"a0", b"b0", b"a1", b"b1", b"a2", b"b2"]
    assert {m.group for m in home.browse()} == {"customer-42"}
    received = run("receive", orders, "-n", "6", "--json")
    assert received.exit_code == 0, received.output
    rows = [json.loads(line) for line in received.stdout.splitlines()]
    assert [row["body"] for row in rows] == ["a0", "b0", "a1", "b1", "a2", "b2"]
    assert {row["group"] for row in rows} == {"customer-42"}
    bad = run("publish", orders, "--group", "has space", "x")
    assert bad.exit_code == 2 and "printable ASCII" in bad.output
    assert queue.counts().total == 0


def test_stats_shows_every_partition_in_the_table_and_json(tmp_path: Path) -> None:
    orders = str(tmp_path / "orders")
    queue = vsqs.PartitionedQueue(orders, partitions=3)
    queue.partition_queues[1].publish_batch([b"x", b"y"])
    queue.partition_queues[2].publish(b"z")
    table = run("stats", orders)
    assert table.exit_code == 0, table.output
    lines = [line.split() for line in table.stdout.splitlines()]
    rows = {line[0]: line[1:3] for line in lines if line and line[0] != "queue"}
    assert rows[orders] == ["3", "0"]
    assert [rows[f"partition-{n}"] for n in range(3)] == [["0", "0"], ["2", "0"], ["1", "0"]]
    as_json = json.loads(run("stats", orders, "--json").stdout)
    assert as_json["ready"] == 3
    assert [(p["partition"], p["ready"]) for p in as_json["partitions"]] == [(0, 0), (1, 2), (2, 1)]
    plain = str(tmp_path / "plain")
    vsqs.Queue(plain).publish(b"x")
    assert json.loads(run("stats", plain, "--json").stdout)["partitions"] == []
    assert "partition-" not in run("stats", plain).stdout
