"""JupyterHub for the course on one machine: `make classroom` starts it (``python -m autograder.classroom start``).

Everything machine-specific (the port, the users, the folders) comes from the state file that command writes
(``GPUCOURSE_CLASSROOM_STATE``), so this file is the same on every machine; ``autograder/classroom.py`` says
what each setting is for. A university swaps the authenticator (PAM here, the machine's own passwords) for its
single sign-on: ``ltiauthenticator`` for an LMS, ``oauthenticator`` for OAuth/OpenID Connect; the rest stays.
"""

import json
import os

state = json.loads(open(os.environ["GPUCOURSE_CLASSROOM_STATE"]).read())
c = get_config()  # noqa: F821 (injected by JupyterHub)

# Localhost only: the hub's public side, its API and the proxy's API.
c.JupyterHub.bind_url = f"http://127.0.0.1:{state['port']}"
c.JupyterHub.hub_ip = "127.0.0.1"
c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{state['proxy_api_port']}"
c.ConfigurableHTTPProxy.command = [state["proxy"]]
c.JupyterHub.db_url = f"sqlite:///{state['folder']}/jupyterhub.sqlite"
c.JupyterHub.cookie_secret_file = f"{state['folder']}/jupyterhub_cookie_secret"
c.JupyterHub.pid_file = f"{state['folder']}/jupyterhub.pid"

# Local system users with their own passwords (PAM); the instructor is the hub's admin.
c.Authenticator.allowed_users = set(state["students"]) | {state["instructor"]}
c.Authenticator.admin_users = {state["instructor"]}
c.PAMAuthenticator.open_sessions = False  # no login session records for a notebook server

# Each user's JupyterLab runs as that user, from the course's environment, in their home folder.
c.Spawner.cmd = [state["singleuser"]]
c.Spawner.default_url = "/lab"
c.Spawner.notebook_dir = "~"
c.Spawner.start_timeout = 180  # a busy 2-core machine: JupyterLab's first start imports a lot
c.Spawner.http_timeout = 180


def role_settings(spawner):
    """Students: nbgrader's Assignment List only (no Formgrader, Create Assignment, Validate or Course List);
    the instructor: everything. Both read the exchange's place from their role's config folder."""
    role = "instructor" if spawner.user.name == state["instructor"] else "student"
    spawner.environment["JUPYTER_CONFIG_PATH"] = state["config_path"][role]
    spawner.args = list(state["server_args"][role])


c.Spawner.pre_spawn_hook = role_settings
