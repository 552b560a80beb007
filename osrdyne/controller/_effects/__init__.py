"""What the controller does: the loops, consumers and readers that touch the broker, its
management API and the driver, each carrying out the decisions of `_decisions`.
"""
