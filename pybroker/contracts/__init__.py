"""typing.Protocol definitions that the native core and its pure twins both satisfy."""
