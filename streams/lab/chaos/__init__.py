"""`peerwatch chaos`: a fault harness for the whole service (lab side, not shipped to run).

``run`` starts the real parts and injects the faults, ``faults`` names them,
``proxy`` is the stalling loopback proxy in front of Alertmanager and
``tally`` counts what was lost or doubled.
"""
