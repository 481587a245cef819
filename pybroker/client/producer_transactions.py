"""The transaction methods of ``AsyncProducer`` and ``Producer`` (confluent-kafka's names and
behaviour), set up with ``transactional.id`` (and ``transaction.timeout.ms``, default 60000)::

    producer.init_transactions(timeout=None)     # once: fences older producers of the id
    producer.begin_transaction()
    producer.produce(...)                        # only inside a transaction
    producer.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata(), timeout=None)
    producer.commit_transaction(timeout=None)    # flush, then commit
    producer.abort_transaction(timeout=None)     # drop unsent records, then abort

``timeout`` is in seconds (None or negative: ``max.block.ms``). Failures raise
``TransactionError`` with confluent-kafka's flags: ``retriable`` (a timeout: call the same method
again), ``txn_requires_abort`` (call ``abort_transaction``, then begin a new transaction) or
``fatal`` (e.g. PRODUCER_FENCED: another producer with the same id took over; close this one).
The machinery is in ``transactions.py``.
"""
from pybroker.client.errors import TransactionError
from pybroker.client.transactions import ABORTABLE_ERROR, ABORTING, COMMITTING, IN_TRANSACTION
from pybroker.protocol.errors import ErrorCode

OPEN_STATES = (IN_TRANSACTION, COMMITTING, ABORTING, ABORTABLE_ERROR)
CLOSE_ABORT_S = 5.0  # closing with an open transaction aborts it for at most this long


def manager(engine):
    """The engine's TransactionManager; a state error when ``transactional.id`` is not set."""
    if engine.txn is None:
        raise TransactionError(ErrorCode.INVALID_TXN_STATE, "transactional.id is not set",
                               name="NOT_TRANSACTIONAL")
    return engine.txn


class AsyncTransactions:
    """Transaction methods of AsyncProducer (coroutines)."""

    async def init_transactions(self, timeout: float | None = None) -> None:
        await self._ensure_started()
        await manager(self._engine).init(timeout)

    def begin_transaction(self) -> None:
        manager(self._engine).begin()

    async def send_offsets_to_transaction(self, offsets, group_metadata, timeout: float | None = None) -> None:
        await manager(self._engine).send_offsets(offsets, group_metadata, timeout)

    async def commit_transaction(self, timeout: float | None = None) -> None:
        await manager(self._engine).commit(timeout)

    async def abort_transaction(self, timeout: float | None = None) -> None:
        await manager(self._engine).abort(timeout)

    async def _abort_before_close(self) -> bool:
        """Abort an open transaction (bounded); whether records can still be flushed."""
        txn = self._engine.txn
        if txn is None:
            return True
        if txn.state in OPEN_STATES:
            try:
                await txn.abort(CLOSE_ABORT_S)
            except TransactionError:
                pass
        return txn.state in (IN_TRANSACTION, COMMITTING) or self._engine.appender.pending == 0


class SyncTransactions:
    """Transaction methods of the blocking Producer; delivery callbacks keep running on the
    caller's thread while a method waits (as in flush)."""

    def init_transactions(self, timeout: float | None = None) -> None:
        txn = manager(self._engine)
        self._check_open()
        self._serve_until(txn.init(timeout))

    def begin_transaction(self) -> None:
        txn = manager(self._engine)
        self._check_open()

        async def begin():
            txn.begin()
        self._thread.run(begin())

    def send_offsets_to_transaction(self, offsets, group_metadata, timeout: float | None = None) -> None:
        txn = manager(self._engine)
        self._check_open()
        self._serve_until(txn.send_offsets(offsets, group_metadata, timeout))

    def commit_transaction(self, timeout: float | None = None) -> None:
        txn = manager(self._engine)
        self._check_open()
        self._serve_until(txn.commit(timeout))

    def abort_transaction(self, timeout: float | None = None) -> None:
        txn = manager(self._engine)
        self._check_open()
        self._serve_until(txn.abort(timeout))

    def _txn_produce(self, topic, value=None, key=None, partition=-1, timestamp=None, headers=None,
                     on_delivery=None) -> None:
        """``produce`` of a transactional producer: only inside a transaction."""
        self._engine.txn.check_produce()
        return self._engine.appender.produce(topic, value, key, partition, timestamp, headers, on_delivery)

    def _serve_until(self, coro):
        """Run ``coro`` on the loop (it bounds itself) while serving delivery callbacks here."""
        fut = self._thread.submit(coro)
        fut.add_done_callback(lambda _: self._notify())  # wake the wait below at once
        while not fut.done():
            self.poll(0)
            with self._cv:
                if not self._reports and not fut.done():
                    self._cv.wait(0.05)
        self.poll(0)
        return fut.result()

    def _abort_before_close(self) -> bool:
        """Abort an open transaction (bounded); whether records can still be flushed."""
        txn = self._engine.txn
        if txn is None or not self._thread.running:
            return True
        if txn.state in OPEN_STATES:
            try:
                self._serve_until(txn.abort(CLOSE_ABORT_S))
            except TransactionError:
                pass
        return txn.state in (IN_TRANSACTION, COMMITTING) or self._engine.appender.pending == 0
