"""Baton's state in Redis: key names, fenced writes, the journal and ledger, leases, records and reads."""
