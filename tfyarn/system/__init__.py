"""The operating system as tfyarn uses it: processes, their trees and streams, inotify,
the local store's bell, small HTTP servers. Knows nothing of jobs (below `protocol`).

Must not import from the layers above it (protocol, hdfs, runtime, data, client, cli).
"""
