"""kit.nn.turn_lock: a network's lock is re-entrant, counts the threads that wait for it, and lets them
in between two iterations of a trainer that would otherwise take it straight back."""

import threading

from kit.nn.turn_lock import TurnLock

WAIT_S = 10.0  # every wait below is bounded


def _wait_until(condition):
    done = threading.Event()
    for _ in range(int(WAIT_S / 0.001)):
        if condition():
            return True
        done.wait(0.001)
    return condition()


def test_it_is_re_entrant_and_nobody_waits_for_its_holder():
    lock = TurnLock()
    with lock, lock:
        assert lock.waiting == 0 and lock.rlock._is_owned()
    assert not lock.rlock._is_owned()


def test_a_thread_that_waits_is_counted_and_let_in_between_two_iterations():
    lock, got_in, order = TurnLock(), threading.Event(), []

    def saver():
        with lock:
            order.append("save")
            got_in.set()

    lock.__enter__()  # the trainer holds the lock through an iteration
    waiter = threading.Thread(target=saver, daemon=True)
    waiter.start()
    try:
        assert _wait_until(lambda: lock.waiting == 1), "the saver was not counted as waiting"
        order.append("iteration")
    finally:
        lock.__exit__(None, None, None)
    lock.let_waiters_in(patience=WAIT_S)  # between two iterations
    with lock:
        order.append("next iteration")
    assert got_in.wait(WAIT_S)
    waiter.join(WAIT_S)
    assert order == ["iteration", "save", "next iteration"] and lock.waiting == 0


def test_let_waiters_in_waits_at_most_its_patience():
    lock = TurnLock()
    lock.waiting = 1  # a count that never drops: the wait ends at the deadline, not never
    lock.let_waiters_in(patience=0.01)
    assert lock.waiting == 1
