"""What runs with the job, in the ApplicationMaster or a container (locally: as processes):
the driver, the launchers and their process containment, gangs, the job page,
TensorBoard.

Must not be imported by the gateway's client except to start these processes.
"""
