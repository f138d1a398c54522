"""The store protocol every process of a job speaks: keys (kv), the one reader of task
states (taskstate), the allreduce rendezvous, and skeinlink, the only module that
imports skein/grpc.

Must not know how a job is submitted or how processes are started.
"""
