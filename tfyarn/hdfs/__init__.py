"""Hadoop configuration and HDFS: the hdfs:// plugin for TensorFlow (native source, build,
the sitecustomize hook), WebHDFS, the HDFS cache, the data check.

Must not know about jobs, tasks or the store.
"""
