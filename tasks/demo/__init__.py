"""`baton demo`: an embedded Redis, local workers and the scenarios that tour Baton's guarantees."""
