"""Topic ids (KIP-516) in-process: the partition.metadata file format and its checks
(against real brokers: tests/broker/test_topic_ids.py)."""
import os
import uuid

import pytest

from pybroker.log import partition_metadata as pm
from tests.broker.test_topic_ids import INCONSISTENT_TOPIC_ID, KAFKA_STORAGE_ERROR, ZERO, b64


def test_partition_metadata_format_and_checks(tmp_path):
    d = str(tmp_path)
    topic_id = uuid.uuid4()
    assert pm.check_or_assign(d, None) is None and not os.path.exists(os.path.join(d, pm.FILE_NAME))
    assert pm.check_or_assign(d, topic_id) == topic_id
    with open(os.path.join(d, pm.FILE_NAME)) as f:
        assert f.read() == f"version: 0\ntopic_id: {b64(topic_id)}"  # Kafka's bytes, no trailing newline
    assert pm.check_or_assign(d, topic_id) == topic_id
    assert pm.check_or_assign(d, ZERO) == topic_id  # an unknown id takes the directory's
    with pytest.raises(pm.InconsistentTopicIdError) as err:
        pm.check_or_assign(d, uuid.uuid4())
    assert err.value.code == INCONSISTENT_TOPIC_ID
    open(os.path.join(d, pm.FILE_NAME), "w").close()  # left empty by a power loss: written again
    assert pm.check_or_assign(d, topic_id) == topic_id and pm.read(d) == topic_id
    for bad in ("garbage", "version: x\ntopic_id: AAAAAAAAAAAAAAAAAAAAAA", f"version: 0\ntopic_id: {b64(ZERO)}",
                "version: 0\ntopic_id: !!"):
        with open(os.path.join(d, pm.FILE_NAME), "w") as f:
            f.write(bad)
        with pytest.raises(pm.PartitionMetadataError) as err:
            pm.check_or_assign(d, topic_id)
        assert err.value.code == KAFKA_STORAGE_ERROR
    assert pm.decode(f"version: 0\ntopic_id: {b64(topic_id)}\n") == topic_id  # Kafka reads a trailing newline too

