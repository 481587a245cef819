"""A fresh ``pybroker serve`` for one benchmark: in a temporary directory, started on enter, stopped and
its data removed on exit. A benchmark's subclass prepares what it needs in ``ready``."""
import os
import shutil
import tempfile


class ScratchBroker:
    def __init__(self, prefix: str, overrides: dict):
        from tests.broker import BrokerProcess
        self.tmp = tempfile.mkdtemp(prefix=prefix)
        self.data_dir = os.path.join(self.tmp, "data")
        self.proc = BrokerProcess(self.data_dir, overrides)

    def __enter__(self):
        try:
            self.proc.start()
            self.ready()
        except BaseException:
            self.__exit__()
            raise
        return self

    def ready(self) -> None:
        """Whatever the benchmark needs of the started broker before it measures."""

    def __exit__(self, *exc) -> None:
        try:
            self.proc.stop()
        finally:
            self.proc.close()
            shutil.rmtree(self.tmp, ignore_errors=True)

    @property
    def bootstrap(self) -> str:
        return self.proc.bootstrap

    @property
    def port(self) -> int:
        return self.proc.port

    @property
    def pid(self) -> int:
        return self.proc.proc.pid
