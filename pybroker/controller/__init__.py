"""Controller and cluster metadata: the topic table (``local`` store on a single node)."""
from pybroker.controller.metadata_store import LocalMetadataStore, TopicRecord

__all__ = ["LocalMetadataStore", "TopicRecord"]
