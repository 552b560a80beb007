"""What the controller decides, apart from what it does: pure rules, no I/O, the clock passed
in (import-linter keeps them so: pyproject.toml). Each is tested without a broker.

    pool_state  the expected state of a pool's groups (statuses, generation)
    lifecycle   each group's life cycle and its deadlines (required, unbound, stopped)
    reconcile   plans: which request queues and worker groups to create, bind, unbind, remove
    scaling     how many workers a group wants, from its load (`Scaler.decide(load, now)`)
    breaker     when a group is failing (workers dying at start), and what ends it
    gate        whether a key may have a group: one decision for every way in
    admission   the gate's checks of a new key (group cap, driver capacity, broker limits)
    broker_figures  the management API's answers on the broker's limits, as figures
    leaderless  which quorum request queues have had no leader long enough to be made again
    history     each key's recent timeline and dead letters
    status      the status document's model (`/status`) and the group query
"""
