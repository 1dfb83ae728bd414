"""stop_processes joins what exits by itself and forces only what does not, whatever the moment a child exits."""

import multiprocessing as mp
import time

from appo.protocol.processes import stop_processes


def _sleep(seconds: float) -> None:
    time.sleep(seconds)


def test_children_exiting_at_staggered_moments_are_joined_not_forced():
    ctx = mp.get_context("spawn")
    children = [ctx.Process(target=_sleep, args=(0.05 * i,), name=f"c{i}") for i in range(6)]
    for child in children:
        child.start()
    try:
        forced = stop_processes(children, timeout=20.0)
        assert forced == []
        assert all(c.exitcode == 0 for c in children)
    finally:
        for child in children:
            if child.is_alive():
                child.kill()
                child.join()


class _ExitsBetweenTwoLooks:
    """A child that exits between the driver's two is_alive() calls: the race CI once hit (StopIteration)."""

    name = "racy"

    def __init__(self) -> None:
        self.looks = 0

    def is_alive(self) -> bool:
        self.looks += 1
        return self.looks == 1

    def join(self, timeout: float | None = None) -> None:
        pass


def test_a_child_exiting_between_two_liveness_checks_ends_the_wait():
    assert stop_processes([_ExitsBetweenTwoLooks()], timeout=5.0) == []
