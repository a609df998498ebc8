"""The running gateway: hub (one per process, epochs), router (the gate), surface, barrier, checks, lock."""
