"""The state beside Temporal, in one place: each store's protocol with its local (SQLite, files)
backend, the PostgreSQL backends that several hosts share, the settings that choose between them,
and the errors a store's outage raises.

- ``conversations``: the conversation store (each message once) and the large-payload store.
- ``idempotency``: the results of ``ctx.once`` effects.
- ``workspaces``: the file tools' workspaces; ``layouts`` the folder names earlier releases used.
- ``postgres``: every store above on one PostgreSQL database (``AGENT_DATABASE_URL``).
- ``leases``: the worker leases in that database, by which hosts see each other's death.
- ``settings``: ``StoreSettings``, which store lives where, and opening them.
- ``errors``: ``outage`` (which errors are a store's outage), ``StoreDown`` (an outage, waited out)
  and the store identity that keeps workers of different stores apart.
"""
