"""The pytest plugin, as a user's test suite sees it (run inside pytester)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

# The README's example, word for word.
README_EXAMPLE = """
import vsqs


def test_worker(vsqs_queue: vsqs.AnyQueue) -> None:
    vsqs_queue.publish(b"resize cat.jpg")
    message = vsqs_queue.receive(timeout=0)  # None if nothing was ready
    assert message is not None and message.body == b"resize cat.jpg"
"""


def test_the_readme_example_runs_with_the_entry_point_alone(pytester: pytest.Pytester) -> None:
    """A fresh process, no conftest and no -p: the pytest11 entry point loads the plugin."""
    pytester.makepyfile(README_EXAMPLE)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    result = pytester.runpytest_subprocess("-p", "no:vsqs", "-p", "no:cacheprovider")
    result.assert_outcomes(errors=1)  # without the plugin the fixture does not exist
    result.stdout.fnmatch_lines(["*fixture 'vsqs_queue' not found*"])


def test_fixtures_clock_factory_root_and_marker(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest
        import vsqs
        from vsqs.testing import ManualClock, assert_consistent, assert_empty, drain

        def test_clock_expires_a_lease_without_sleeping(vsqs_queue, vsqs_clock):
            assert isinstance(vsqs_clock, ManualClock)
            vsqs_queue.publish(b"job")
            assert vsqs_queue.receive(timeout=0).body == b"job"
            assert vsqs_queue.receive(timeout=5) is None  # five manual seconds, no real ones
            vsqs_clock.advance(31)
            assert [m.body for m in drain(vsqs_queue)] == [b"job"]
            assert_empty(vsqs_queue)
            assert_consistent(vsqs_queue)

        def test_queue_is_fresh_and_not_durable(vsqs_queue, tmp_path):
            assert len(vsqs_queue) == 0
            assert vsqs_queue.durable is False
            assert vsqs_queue.path.startswith(str(tmp_path))

        @pytest.mark.vsqs(visibility_timeout=5, capacity=1)
        def test_marker_options(vsqs_queue, vsqs_clock):
            assert vsqs_queue.visibility_timeout == 5
            vsqs_queue.publish(b"a")
            with pytest.raises(vsqs.QueueFull):
                vsqs_queue.publish(b"b", timeout=0)

        def test_factory_same_name_same_queue(vsqs_queue_factory):
            producer = vsqs_queue_factory("orders")
            consumer = vsqs_queue_factory("orders", visibility_timeout=1)
            producer.publish(b"x")
            assert consumer.receive(timeout=0).body == b"x"
            with pytest.raises(vsqs.InvalidName):
                vsqs_queue_factory("../escape")

        def test_root(vsqs_root, vsqs_clock):
            queue = vsqs_root.create("orders")
            assert vsqs_root.list() == ["orders"]
            assert queue.clock is vsqs_clock

        def test_assert_empty_fails_on_a_message(vsqs_queue):
            vsqs_queue.publish(b"left over")
            with pytest.raises(AssertionError, match="is not empty"):
                assert_empty(vsqs_queue)

        def test_assert_consistent_finds_an_orphan(vsqs_queue):
            with open(f"{vsqs_queue.path}/1700000000000000.new", "wb"):
                pass
            with pytest.raises(AssertionError, match="orphaned 1700000000000000.new"):
                assert_consistent(vsqs_queue)
            assert_consistent(vsqs_queue, allow_new=True)
        """
    )
    result = pytester.runpytest("-p", "no:cacheprovider", "--strict-markers", "-W", "error")
    result.assert_outcomes(passed=7)


def test_the_marker_is_registered(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--markers")
    result.stdout.fnmatch_lines(["@pytest.mark.vsqs(**options):*"])


def test_the_pytest_guide_is_a_passing_test_module(pytester: pytest.Pytester) -> None:
    guide = Path(__file__).resolve().parent.parent / "docs" / "guides" / "pytest.rst"
    blocks = re.findall(r"\.\. code-block:: python\n\n((?:   .*\n|\n)+)", guide.read_text())
    source = "\n".join(re.sub(r"(?m)^   ", "", block) for block in blocks)
    assert README_EXAMPLE.strip() in source  # the README's example is the guide's first
    pytester.makepyfile(source)
    result = pytester.runpytest("-p", "no:cacheprovider", "--strict-markers", "-W", "error")
    result.assert_outcomes(passed=3)
