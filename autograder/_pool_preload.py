"""Imported once, by multiprocessing's fork server, before it forks a grading run's pool processes.

It starts this machine's plain worker fork server (:mod:`autograder.forkserver`) there, so every
pool process forked afterwards inherits it (its socket) instead of starting one of its own: about
1-4 s of CPU each, and a run starts a pool process per job (again for students regraded after a
pool process died). Requests are single messages, each carrying its own status pipe, so pool
processes can share the socket. Warm servers (``torch.compile``, ``@njit``) are still started by
the pool process that first needs one: most modules never do.

Importing this module anywhere else starts that server too; nothing else imports it.
"""

from . import forkserver, sandbox

try:
    if forkserver.enabled():
        forkserver.server(sandbox.Limits().threads)
except Exception:  # noqa: BLE001 - without it each pool process starts its own, as before
    pass
