"""What runs on the gateway: the common client part, the local and YARN backends, the RM
REST client, staging, log following, signals.

Must not be imported by anything that runs in a container (checked by import-linter's layers).
"""
