"""The agent core: messages, providers, tools, the turn loop, rounds and history repair.

Nothing in this package imports Celery; Redis is reached only through the small protocols the
`tasks` package implements.
"""
