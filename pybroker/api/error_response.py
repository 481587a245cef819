"""A refusal of a whole request: the request's own response, at its version, carrying one error.

Shaped as Apache Kafka shapes it (each request's ``getErrorResponse``): APIs with a top-level error
code set it; APIs whose answer is per topic, partition, group or resource echo the request's items,
each with the error (and the "unknown" values Kafka puts beside it: offsets -1, no leader...).
Messages: ``message`` where Kafka sends the exception's message, the error code's standard
description where Kafka sends that. Fields a version cannot carry are dropped by the codecs, so an
error may be invisible in old versions (Metadata with no topics), exactly as in Kafka.

``error_response(api_key, version, request, code, message)`` returns the response object, or None
when the request wants no answer (Produce with acks=0).
"""
from pybroker.protocol import ErrorCode
from pybroker.protocol.messages import RESPONSES

NO_OFFSET = -1  # offsets, timestamps, epochs and ids Kafka answers as "unknown"
NO_AUTHORIZED_OPERATIONS = -2147483648


def error_response(api_key: int, version: int, request, code: int, message: str | None = None):
    cls = RESPONSES[api_key]
    build = _BUILDERS.get(api_key)
    if build is None:
        return _top_level(cls, code, message)
    return build(cls, version, request, code, message)


def _top_level(cls, code, message, **values):
    """The response with its top-level error code (and message), everything else at its default."""
    response = cls(**values)
    if hasattr(response, "error_code"):
        response.error_code = code
    if hasattr(response, "error_message"):
        response.error_message = message
    return response


def _describe(code) -> str:
    return ErrorCode(code).description


# ---- data plane ------------------------------------------------------------------------------

def _produce(cls, version, request, code, message):
    if request.acks == 0:
        return None
    topics = {}
    for topic in request.topic_data:
        answer = topics.setdefault(topic.name, cls.TopicProduceResponse(name=topic.name, partition_responses=[]))
        answer.partition_responses += [cls.PartitionProduceResponse(
            index=p.index, error_code=code, base_offset=NO_OFFSET, log_append_time_ms=NO_OFFSET,
            log_start_offset=NO_OFFSET, record_errors=[], error_message=message) for p in topic.partition_data]
    return cls(responses=list(topics.values()))


def _fetch(cls, version, request, code, message):
    topics = [] if version >= 13 else [cls.FetchableTopicResponse(
        topic=t.topic, topic_id=t.topic_id, partitions=[cls.PartitionData(
            partition_index=p.partition, error_code=code, high_watermark=NO_OFFSET, aborted_transactions=[])
            for p in t.partitions]) for t in request.topics]
    return cls(error_code=code, session_id=request.session_id, responses=topics)


def _list_offsets(cls, version, request, code, message):
    return cls(topics=[cls.ListOffsetsTopicResponse(name=t.name, partitions=[cls.ListOffsetsPartitionResponse(
        partition_index=p.partition_index, error_code=code, old_style_offsets=[], offset=NO_OFFSET,
        timestamp=NO_OFFSET) for p in t.partitions]) for t in request.topics])


def _metadata(cls, version, request, code, message):
    return cls(topics=[cls.MetadataResponseTopic(name=t.name or "", topic_id=t.topic_id, error_code=code,
                                                 is_internal=False, partitions=[])
                       for t in request.topics or ()])


def _offset_for_leader_epoch(cls, version, request, code, message):
    return cls(topics=[cls.OffsetForLeaderTopicResult(topic=t.topic, partitions=[cls.EpochEndOffset(
        partition=p.partition, error_code=code, leader_epoch=NO_OFFSET, end_offset=NO_OFFSET)
        for p in t.partitions]) for t in request.topics])


def _delete_records(cls, version, request, code, message):
    return cls(topics=[cls.DeleteRecordsTopicResult(name=t.name, partitions=[cls.DeleteRecordsPartitionResult(
        partition_index=p.partition_index, error_code=code, low_watermark=NO_OFFSET) for p in t.partitions])
        for t in request.topics])


def _init_producer_id(cls, version, request, code, message):
    return cls(error_code=code, producer_id=NO_OFFSET, producer_epoch=NO_OFFSET)


def _describe_producers(cls, version, request, code, message):
    return cls(topics=[cls.TopicResponse(name=t.name, partitions=[
        cls.PartitionResponse(partition_index=i, error_code=code) for i in t.partition_indexes])
        for t in request.topics])


def _describe_topic_partitions(cls, version, request, code, message):
    return cls(topics=[cls.DescribeTopicPartitionsResponseTopic(name=t.name, error_code=code, is_internal=False,
                                                                partitions=[]) for t in request.topics])


# ---- transactions ----------------------------------------------------------------------------

def _add_partitions_to_txn(cls, version, request, code, message):
    if version >= 4:  # the brokers' batched form: one top-level error
        return cls(error_code=code, results_by_transaction=[])
    return cls(results_by_topic_v3_and_below=[cls.AddPartitionsToTxnTopicResult(
        name=t.name, results_by_partition=[cls.AddPartitionsToTxnPartitionResult(
            partition_index=i, partition_error_code=code) for i in t.partitions])
        for t in request.v3_and_below_topics])


def _write_txn_markers(cls, version, request, code, message):
    return cls(markers=[cls.WritableTxnMarkerResult(producer_id=m.producer_id, topics=[
        cls.WritableTxnMarkerTopicResult(name=t.name, partitions=[cls.WritableTxnMarkerPartitionResult(
            partition_index=i, error_code=code) for i in t.partition_indexes]) for t in m.topics])
        for m in request.markers])


def _txn_offset_commit(cls, version, request, code, message):
    return cls(topics=[cls.TxnOffsetCommitResponseTopic(name=t.name, partitions=[
        cls.TxnOffsetCommitResponsePartition(partition_index=p.partition_index, error_code=code)
        for p in t.partitions]) for t in request.topics])


def _describe_transactions(cls, version, request, code, message):
    return cls(transaction_states=[cls.TransactionState(error_code=code, transactional_id=tid)
                                   for tid in request.transactional_ids])


# ---- groups ----------------------------------------------------------------------------------

def _offset_commit(cls, version, request, code, message):
    return cls(topics=[cls.OffsetCommitResponseTopic(name=t.name, partitions=[cls.OffsetCommitResponsePartition(
        partition_index=p.partition_index, error_code=code) for p in t.partitions]) for t in request.topics])


def _offset_fetch(cls, version, request, code, message):
    if version >= 8:
        return cls(groups=[cls.OffsetFetchResponseGroup(group_id=g.group_id, topics=[], error_code=code)
                           for g in request.groups])
    if version >= 2:  # a group-level error code: no partitions
        return cls(error_code=code, topics=[])
    return cls(topics=[cls.OffsetFetchResponseTopic(name=t.name, partitions=[cls.OffsetFetchResponsePartition(
        partition_index=i, committed_offset=NO_OFFSET, metadata="", error_code=code) for i in t.partition_indexes])
        for t in request.topics or ()])


def _find_coordinator(cls, version, request, code, message):
    if version >= 4:
        return cls(coordinators=[cls.Coordinator(key=key, node_id=-1, host="", port=-1, error_code=code,
                                                 error_message=_describe(code)) for key in request.coordinator_keys])
    return cls(error_code=code, error_message=_describe(code), node_id=-1, host="", port=-1)


def _join_group(cls, version, request, code, message):
    return cls(error_code=code, generation_id=-1, protocol_name=None if version >= 7 else "", leader="",
               member_id="", members=[])


def _describe_groups(cls, version, request, code, message):
    return cls(groups=[cls.DescribedGroup(group_id=g, error_code=code, group_state="", protocol_type="",
                                          protocol_data="", members=[],
                                          authorized_operations=NO_AUTHORIZED_OPERATIONS)
                       for g in request.groups])


def _delete_groups(cls, version, request, code, message):
    return cls(results=[cls.DeletableGroupResult(group_id=g, error_code=code) for g in request.groups_names])


def _offset_delete(cls, version, request, code, message):  # one group-level error, no partitions
    return cls(error_code=code, topics=[])


def _consumer_group_heartbeat(cls, version, request, code, message):  # Kafka sends no message here
    return cls(error_code=code, error_message=None)


def _consumer_group_describe(cls, version, request, code, message):
    return cls(groups=[cls.DescribedGroup(group_id=g, error_code=code) for g in request.group_ids])


def _share_group_describe(cls, version, request, code, message):
    return cls(groups=[cls.DescribedGroup(group_id=g, error_code=code, members=[]) for g in request.group_ids])


def _describe_share_group_offsets(cls, version, request, code, message):  # each group, no partitions
    return cls(groups=[cls.DescribeShareGroupOffsetsResponseGroup(
        group_id=g.group_id, topics=[], error_code=code, error_message=message or _describe(code))
        for g in request.groups])


# ---- admin -----------------------------------------------------------------------------------

def _create_topics(cls, version, request, code, message):
    return cls(topics=[cls.CreatableTopicResult(name=t.name, error_code=code, error_message=message, configs=[])
                       for t in request.topics])


def _delete_topics(cls, version, request, code, message):
    if version >= 6:
        return cls(responses=[cls.DeletableTopicResult(name=t.name, topic_id=t.topic_id, error_code=code)
                              for t in request.topics])
    return cls(responses=[cls.DeletableTopicResult(name=name, error_code=code) for name in request.topic_names])


def _create_partitions(cls, version, request, code, message):
    return cls(results=[cls.CreatePartitionsTopicResult(name=t.name, error_code=code, error_message=message)
                        for t in request.topics])


def _describe_configs(cls, version, request, code, message):
    return cls(results=[cls.DescribeConfigsResult(error_code=code, error_message=_describe(code),
                                                  resource_type=r.resource_type, resource_name=r.resource_name,
                                                  configs=[]) for r in request.resources])


def _alter_configs(cls, version, request, code, message):  # AlterConfigs and IncrementalAlterConfigs
    return cls(responses=[cls.AlterConfigsResourceResponse(error_code=code, error_message=message,
                                                           resource_type=r.resource_type,
                                                           resource_name=r.resource_name)
                          for r in request.resources])


def _elect_leaders(cls, version, request, code, message):
    results = [cls.ReplicaElectionResult(topic=t.topic, partition_result=[cls.PartitionResult(
        partition_id=i, error_code=code, error_message=message) for i in t.partitions])
        for t in request.topic_partitions or ()]
    return cls(error_code=code, replica_election_results=results)


def _alter_partition_reassignments(cls, version, request, code, message):
    topics = [cls.ReassignableTopicResponse(name=t.name, partitions=[cls.ReassignablePartitionResponse(
        partition_index=p.partition_index, error_code=code, error_message=message) for p in t.partitions])
        for t in request.topics]
    return cls(error_code=code, error_message=message, responses=topics)


def _list_partition_reassignments(cls, version, request, code, message):
    topics = [cls.OngoingTopicReassignment(name=t.name, partitions=[
        cls.OngoingPartitionReassignment(partition_index=i) for i in t.partition_indexes])
        for t in request.topics or ()]
    return cls(error_code=code, error_message=message, topics=topics)


def _describe_client_quotas(cls, version, request, code, message):
    return cls(error_code=code, error_message=message, entries=None)


def _alter_client_quotas(cls, version, request, code, message):
    return cls(entries=[cls.EntryData(error_code=code, error_message=_describe(code), entity=[
        cls.EntityData(entity_type=e.entity_type, entity_name=e.entity_name) for e in entry.entity])
        for entry in request.entries])


# ---- security --------------------------------------------------------------------------------

def _create_acls(cls, version, request, code, message):
    return cls(results=[cls.AclCreationResult(error_code=code, error_message=message) for _ in request.creations])


def _delete_acls(cls, version, request, code, message):
    return cls(filter_results=[cls.DeleteAclsFilterResult(error_code=code, error_message=message, matching_acls=[])
                               for _ in request.filters])


def _describe_user_scram_credentials(cls, version, request, code, message):
    # one result per user asked for, without its name (as Kafka answers)
    results = [cls.DescribeUserScramCredentialsResult(error_code=code, error_message=message)
               for _ in request.users or ()]
    return cls(error_code=code, error_message=message, results=results)


def _alter_user_scram_credentials(cls, version, request, code, message):
    users = sorted({c.name for c in request.deletions} | {c.name for c in request.upsertions})
    return cls(results=[cls.AlterUserScramCredentialsResult(user=u, error_code=code, error_message=message)
                        for u in users])


def _sasl_handshake(cls, version, request, code, message):
    return cls(error_code=code, mechanisms=[])


def _api_versions(cls, version, request, code, message):
    return cls(error_code=code, api_keys=[])


# ---- inter-broker ----------------------------------------------------------------------------

def _leader_and_isr(cls, version, request, code, message):
    if version >= 5:
        return cls(error_code=code, topics=[cls.LeaderAndIsrTopicError(topic_id=t.topic_id, partition_errors=[
            cls.LeaderAndIsrPartitionError(partition_index=p.partition_index, error_code=code)
            for p in t.partition_states]) for t in request.topic_states])
    if version >= 2:
        pairs = [(t.topic_name, p.partition_index) for t in request.topic_states for p in t.partition_states]
    else:
        pairs = [(p.topic_name, p.partition_index) for p in request.ungrouped_partition_states]
    return cls(error_code=code, partition_errors=[cls.LeaderAndIsrPartitionError(
        topic_name=name, partition_index=i, error_code=code) for name, i in pairs])


def _stop_replica(cls, version, request, code, message):
    if version >= 3:
        pairs = [(t.topic_name, p.partition_index) for t in request.topic_states for p in t.partition_states]
    elif version >= 1:
        pairs = [(t.name, i) for t in request.topics for i in t.partition_indexes]
    else:
        pairs = [(p.topic_name, p.partition_index) for p in request.ungrouped_partitions]
    return cls(error_code=code, partition_errors=[cls.StopReplicaPartitionError(
        topic_name=name, partition_index=i, error_code=code) for name, i in pairs])


def _alter_replica_log_dirs(cls, version, request, code, message):
    """Each dir's topics as asked, every partition with the error (no top-level error)."""
    return cls(throttle_time_ms=0, results=[cls.AlterReplicaLogDirTopicResult(topic_name=t.name, partitions=[
        cls.AlterReplicaLogDirPartitionResult(partition_index=p, error_code=code) for p in t.partitions])
        for d in request.dirs for t in d.topics])


def _create_delegation_token(cls, version, request, code, message):
    """As Kafka's: the anonymous principal as owner and requester, no timestamps, no token."""
    return cls(error_code=code, principal_type="User", principal_name="ANONYMOUS",
               token_requester_principal_type="User", token_requester_principal_name="ANONYMOUS",
               issue_timestamp_ms=-1, expiry_timestamp_ms=-1, max_timestamp_ms=-1, token_id="", hmac=b"",
               throttle_time_ms=0)


def _share_state(cls, version, request, code, message):
    """Initialize/Read/Write/Delete/ReadShareGroupStateSummary: each share-partition with the error."""
    result_cls = next(getattr(cls, n) for n in ("InitializeStateResult", "ReadStateResult", "WriteStateResult",
                                                "DeleteStateResult", "ReadStateSummaryResult") if hasattr(cls, n))
    return cls(results=[result_cls(topic_id=t.topic_id, partitions=[cls.PartitionResult(
        partition=p.partition, error_code=code, error_message=message or _describe(code)) for p in t.partitions])
        for t in request.topics])


_BUILDERS = {
    0: _produce, 1: _fetch, 2: _list_offsets, 3: _metadata, 4: _leader_and_isr, 5: _stop_replica,
    8: _offset_commit, 9: _offset_fetch, 10: _find_coordinator, 11: _join_group, 15: _describe_groups,
    17: _sasl_handshake, 18: _api_versions, 19: _create_topics, 20: _delete_topics, 21: _delete_records,
    22: _init_producer_id, 23: _offset_for_leader_epoch, 24: _add_partitions_to_txn, 27: _write_txn_markers,
    28: _txn_offset_commit, 30: _create_acls, 31: _delete_acls,
    32: _describe_configs, 33: _alter_configs, 34: _alter_replica_log_dirs, 37: _create_partitions,
    38: _create_delegation_token,
    42: _delete_groups, 43: _elect_leaders,
    44: _alter_configs, 45: _alter_partition_reassignments, 46: _list_partition_reassignments, 47: _offset_delete,
    48: _describe_client_quotas, 49: _alter_client_quotas, 50: _describe_user_scram_credentials,
    51: _alter_user_scram_credentials, 61: _describe_producers, 65: _describe_transactions,
    68: _consumer_group_heartbeat, 69: _consumer_group_describe, 75: _describe_topic_partitions,
    83: _share_state, 84: _share_state, 85: _share_state, 86: _share_state, 87: _share_state,
    77: _share_group_describe, 90: _describe_share_group_offsets,
}
