"""The executor fixture itself: a restart in another thread and a stop must not race."""

from __future__ import annotations

import threading
import time

from conftest import Executor


def test_stop_while_a_restart_waits_for_serving_is_serialized() -> None:
    e = Executor("fixture-race").start()
    errors: list[BaseException] = []

    def restart() -> None:
        try:
            e.restart("fixture-race-2")
        except BaseException as x:  # noqa: BLE001 (pytest.fail raises a BaseException)
            errors.append(x)

    t = threading.Thread(target=restart)
    t.start()
    # The restart's SIGTERM and drain take a moment; stop (as the fixture's teardown does) while it
    # waits for the new process to serve. Unserialized, the restart saw `proc` None and failed.
    time.sleep(0.3)
    e.close()
    t.join(60)
    assert not t.is_alive()
    assert errors == [], errors
    assert e.proc is None, "close() stopped the process the restart started"
