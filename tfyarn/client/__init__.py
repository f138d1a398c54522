"""What runs on the gateway: the common client part, the local and YARN backends, the RM
REST client, staging, log following, signals."""
