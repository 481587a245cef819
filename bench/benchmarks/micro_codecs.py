"""Produce request decode and Fetch response encode: native, pure twin, and the generated
codec they replace. Cases are built with bench/bench_codec.py's helpers."""
from . import INSTALLED  # noqa: F401  sets up the import paths first

import bench_codec  # noqa: E402


class DecodeProduce:
    params = [["native", "pure", "generated"], ["1x1", "10x10"]]
    param_names = ["impl", "topics_x_partitions"]

    def setup(self, impl, shape):
        ntopics, nparts = map(int, shape.split("x"))
        self.frame, self.pos = bench_codec.produce_frame(ntopics, nparts)
        if impl == "generated":
            self.decode = lambda: bench_codec.ProduceRequest.decode(self.frame, self.pos, 8)
        else:
            try:
                module = bench_codec.load(impl)
            except ImportError:
                raise NotImplementedError(f"no {impl} kafka_codec in this commit")
            self.decode = lambda: module.decode_produce(self.frame, self.pos, 8)

    def time_decode_produce(self, impl, shape):
        return self.decode()


class EncodeFetch:
    params = [["native", "pure", "current"], [1, 16]]
    param_names = ["impl", "partitions"]

    def setup(self, impl, nparts):
        self.topics, self.results = bench_codec.fetch_case(nparts)
        if impl == "current":
            self.encode = bench_codec.fetch_api.encode
        else:
            try:
                self.encode = bench_codec.load(impl).encode_fetch
            except ImportError:
                raise NotImplementedError(f"no {impl} kafka_codec in this commit")

    def time_encode_fetch(self, impl, nparts):
        return self.encode(11, self.topics, self.results, False)
