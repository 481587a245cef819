"""Kafka APIs: one module per API key declaring API_KEY, MIN_VERSION, MAX_VERSION and handle().

``handle(ctx, request)`` returns the response object, an awaitable of it, None (no response:
acks=0), or a ``Parts`` list already encoded (zero-copy Fetch). ApiVersions advertises
exactly this table.
"""
from pybroker.api import (alter_client_quotas, alter_configs, alter_partition_reassignments, api_versions,
                          controlled_shutdown, create_partitions, create_topics, delete_groups, delete_records,
                          delete_topics, describe_client_quotas, describe_cluster, describe_configs, describe_groups,
                          describe_log_dirs, describe_producers, describe_topic_partitions, elect_leaders, fetch,
                          find_coordinator, heartbeat, incremental_alter_configs, init_producer_id, join_group,
                          leader_and_isr, leave_group, list_groups, list_offsets, list_partition_reassignments,
                          metadata, offset_commit, offset_fetch, offset_for_leader_epoch, produce, stop_replica,
                          sync_group, update_metadata)

MODULES = (produce, fetch, list_offsets, metadata, offset_for_leader_epoch, api_versions, create_topics,
           delete_topics, delete_records, init_producer_id, describe_configs, create_partitions, find_coordinator,
           join_group, sync_group, heartbeat, leave_group, offset_commit, offset_fetch, list_groups, describe_groups,
           delete_groups, alter_configs, incremental_alter_configs, leader_and_isr, update_metadata, stop_replica,
           controlled_shutdown, elect_leaders, describe_log_dirs, describe_cluster, describe_producers,
           alter_partition_reassignments, list_partition_reassignments, describe_client_quotas, alter_client_quotas,
           describe_topic_partitions)
from pybroker.api import create_acls, delete_acls, describe_acls  # noqa: E402  (ACLs: pybroker/security)

MODULES += (describe_acls, create_acls, delete_acls)
from pybroker.api import (alter_user_scram_credentials, describe_user_scram_credentials,  # noqa: E402  (SASL)
                          sasl_authenticate, sasl_handshake)

MODULES += (sasl_handshake, sasl_authenticate, describe_user_scram_credentials, alter_user_scram_credentials)
from pybroker.api import (add_offsets_to_txn, add_partitions_to_txn, describe_transactions,  # noqa: E402
                          end_txn, list_transactions)  # (transactions: pybroker/transaction)

MODULES += (add_partitions_to_txn, add_offsets_to_txn, end_txn, describe_transactions, list_transactions)
from pybroker.api import txn_offset_commit  # noqa: E402  (transactional offset commits: pybroker/coordinator)

MODULES += (txn_offset_commit,)
from pybroker.api import write_txn_markers  # noqa: E402  (transaction markers: pybroker/replica)

MODULES += (write_txn_markers,)
from pybroker.api import consumer_group_describe, consumer_group_heartbeat  # noqa: E402  (KIP-848 groups)

MODULES += (consumer_group_heartbeat, consumer_group_describe)
from pybroker.api import offset_delete  # noqa: E402  (OffsetDelete: pybroker/coordinator/offset_deletion.py)

MODULES += (offset_delete,)
from pybroker.api import (alter_replica_log_dirs, create_delegation_token, describe_delegation_token,  # noqa: E402
                          expire_delegation_token, renew_delegation_token, update_features)  # (Kafka 3.8's ZK broker)

MODULES += (alter_replica_log_dirs, create_delegation_token, renew_delegation_token, expire_delegation_token,
            describe_delegation_token, update_features)
from pybroker.api import (delete_share_group_state, initialize_share_group_state,  # noqa: E402  (share groups:
                          read_share_group_state, read_share_group_state_summary, share_acknowledge,  # pybroker/share)
                          share_fetch, share_group_heartbeat, write_share_group_state)

MODULES += (share_group_heartbeat, share_fetch, share_acknowledge, initialize_share_group_state,
            read_share_group_state, write_share_group_state, delete_share_group_state, read_share_group_state_summary)
from pybroker.api import (alter_share_group_offsets, delete_share_group_offsets,  # noqa: E402  (share-group admin:
                          describe_share_group_offsets, share_group_describe)  # pybroker/share/admin.py)

MODULES += (share_group_describe, describe_share_group_offsets, alter_share_group_offsets, delete_share_group_offsets)
TABLE = {m.API_KEY: m for m in MODULES}
api_versions.TABLE.update(TABLE)  # ApiVersions answers from this table without importing it
