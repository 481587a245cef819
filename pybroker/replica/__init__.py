"""Replication: partitions with leader epoch, log end offset, high watermark and ISR."""
