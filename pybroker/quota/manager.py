"""Per-broker quota enforcement, as Kafka's ClientQuotaManager.

Each quota key (producer_byte_rate: Produce request bytes; consumer_byte_rate: Fetch response
bytes; request_percentage: handler time as a percentage of one thread) is measured per matched
entity with a windowed rate of ``quota.window.num`` samples of ``quota.window.size.seconds``. A
quota from an entity with a client-id (or user) default is measured per actual client-id (user),
as Kafka tags its sensors. When the rate passes the quota the throttle time is Kafka's
``(rate - quota) / quota * window``, capped at the whole window; the response carries it and the
connection is muted for that long (KIP-219).
"""
import time

from pybroker.quota import entities as ent
from pybroker.quota.entities import CLIENT_ID, USER


class WindowedRate:
    """Amount per second over ``samples`` buckets of ``sample_s`` seconds; the window counts as at
    least ``samples - 1`` buckets long (Kafka's Rate), so a fresh sensor does not throttle a burst."""

    def __init__(self, samples: int = 11, sample_s: float = 1.0):
        self.samples = max(int(samples), 2)
        self.sample_s = float(sample_s)
        self._buckets: dict[int, float] = {}

    def record(self, amount: float, now: float) -> None:
        bucket = int(now / self.sample_s)
        self._buckets[bucket] = self._buckets.get(bucket, 0.0) + amount
        if len(self._buckets) > self.samples:
            for old in [b for b in self._buckets if b <= bucket - self.samples]:
                del self._buckets[old]

    def measure(self, now: float) -> tuple[float, float]:
        """(rate per second, window length in seconds)."""
        bucket = int(now / self.sample_s)
        live = [(b, n) for b, n in self._buckets.items() if b > bucket - self.samples]
        if not live:
            return 0.0, (self.samples - 1) * self.sample_s
        window = max(now - min(b for b, _ in live) * self.sample_s, (self.samples - 1) * self.sample_s)
        return sum(n for _, n in live) / window, window


class ClientQuotaManager:
    def __init__(self, samples: int = 11, sample_s: float = 1.0, clock=time.monotonic):
        self.samples, self.sample_s = samples, sample_s
        self.clock = clock
        self.configs: dict[tuple, dict[str, float]] = {}  # entity -> {key: value}
        self._sensors: dict[tuple, WindowedRate] = {}      # (key, user, client_id) -> rate
        self._lookup: dict[tuple, tuple] = {}              # (key, user, client_id) -> (quota, sensor key)

    @property
    def enabled(self) -> bool:
        return bool(self.configs)

    @property
    def max_throttle_ms(self) -> int:
        return int(self.samples * self.sample_s * 1000)

    def set_all(self, configs: dict) -> None:
        """Replace every entity's quotas (from the store); sensors of unchanged matches keep their history."""
        self.configs = {e: dict(v) for e, v in configs.items() if v}
        self._lookup.clear()

    def quota_for(self, key: str, user: str, client_id: str) -> tuple:
        """(quota value or None, sensor key) with Kafka's precedence: the most specific entity wins."""
        memo = (key, user, client_id)
        found = self._lookup.get(memo)
        if found is None:
            found = (None, None)
            for entity in ent.candidates(user, client_id):
                value = self.configs.get(entity, {}).get(key)
                if value is not None:
                    d = dict(entity)
                    found = (value, (key, user if USER in d else "", client_id if CLIENT_ID in d else ""))
                    break
            self._lookup[memo] = found
        return found

    def record(self, key: str, user: str, client_id: str, amount: float, now: float | None = None) -> int:
        """Record ``amount`` and return the throttle time in ms (0 when within the quota or unlimited)."""
        quota, sensor_key = self.quota_for(key, user, client_id or "")
        if quota is None:
            return 0
        now = self.clock() if now is None else now
        sensor = self._sensors.get(sensor_key)
        if sensor is None:
            sensor = self._sensors[sensor_key] = WindowedRate(self.samples, self.sample_s)
        sensor.record(amount, now)
        rate, window = sensor.measure(now)
        if rate <= quota:
            return 0
        return min(int((rate - quota) / quota * window * 1000), self.max_throttle_ms)

    def describe(self, components, strict: bool) -> list:
        """[(entity, {key: value})] matching DescribeClientQuotas' filter ``components``:
        [(type, match_type 0 exact / 1 default / 2 any, match)]."""
        wanted = {}
        for etype, match_type, match in components:
            if etype not in (USER, CLIENT_ID):
                raise ent.InvalidQuotaRequestError(f"Custom entity type '{etype}' not supported")
            if etype in wanted:
                raise ent.InvalidQuotaRequestError(f"Duplicate {etype} filter component entity type")
            if match_type == 0 and match is None:
                raise ent.InvalidQuotaRequestError("Exact match requires a name to match against")
            if match_type not in (0, 1, 2):
                raise ent.InvalidQuotaRequestError(f"Unexpected match type {match_type}")
            wanted[etype] = (match_type, match)
        out = []
        for entity, values in sorted(self.configs.items(), key=lambda kv: repr(kv[0])):
            d = dict(entity)
            ok = True
            for etype in (USER, CLIENT_ID):
                rule = wanted.get(etype)
                if rule is None:
                    ok = etype not in d or not strict
                elif etype not in d:
                    ok = False
                elif rule[0] == 0:
                    ok = d[etype] == rule[1]
                elif rule[0] == 1:
                    ok = d[etype] is None
                if not ok:
                    break
            if ok:
                out.append((entity, dict(values)))
        return out


def apply_alterations(configs: dict, alterations) -> dict:
    """A new {entity: {key: value}} from ``alterations``: [(entity, [(key, value, remove)])]."""
    new = {e: dict(v) for e, v in configs.items()}
    for entity, ops in alterations:
        values = new.setdefault(entity, {})
        for key, value, remove in ops:
            if remove:
                values.pop(key, None)
            else:
                values[key] = value
        if not values:
            del new[entity]
    return new
