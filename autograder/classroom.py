"""A classroom on one machine: JupyterHub, local users, nbgrader's exchange, and the trusted grader.

``make classroom`` runs ``python -m autograder.classroom start`` (as root: it creates users); ``make classroom-stop``
stops it. What ``start`` sets up, each part idempotent (a second start keeps every user's files and grades):

* local system users: one instructor and N students (``gpuc-instructor``, ``gpuc-student1`` ...), each with a new
  random password at every start, listed in ``passwords.txt`` in the state folder (readable by root only);
* the instructor's course folder, ``~/gpucourse``: this repository's ``nbgrader_config.py``, ``solutions/`` and
  ``assignments/``, copied once (never overwritten: it holds the gradebook);
* nbgrader's exchange, a folder every user may write (sticky, as /tmp), and each role's Jupyter config folder:
  the exchange's place and the course id for both; for students, nbgrader's instructor UI switched off
  (their JupyterLab shows the Assignment List only);
* JupyterHub (``classroom/jupyterhub_config.py``) on 127.0.0.1 only, its proxy (configurable-http-proxy, from the
  npm registry, installed into ``classroom/node_modules``), PAM logins, each user's JupyterLab started as that user
  from this environment.

The instructor's work happens in a terminal of their own JupyterLab, or through :func:`as_user`
(``docs/classroom.md`` walks through release, fetch, submit, collect, grade, feedback).
"""

from __future__ import annotations

import argparse
import json
import os
import pwd
import secrets
import shutil
import signal
import stat
import subprocess
import sys
import time
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .build import REPO_ROOT
from .lab import NBGRADER_SERVER_EXTENSIONS

CLASSROOM_DIR = REPO_ROOT / "classroom"
HUB_CONFIG = CLASSROOM_DIR / "jupyterhub_config.py"
PROXY = CLASSROOM_DIR / "node_modules" / ".bin" / "configurable-http-proxy"
DEFAULT_STATE = Path("/var/lib/gpucourse-classroom")  # outside any home: every user must reach the exchange in it
STATE_ENV = "GPUCOURSE_CLASSROOM_STATE"
COURSE_FOLDER = "gpucourse"  # in the instructor's home
COURSE_PARTS = ("nbgrader_config.py", "solutions", "assignments")
READY_SECONDS = 120
# nbgrader's JupyterLab plugins a student does not get (the Assignment List and the Nbgrader menu stay).
STUDENT_HIDDEN_PLUGINS = ("formgrader", "create-assignment", "validate-assignment", "course-list")
LAB_DEFAULTS = {"@jupyterlab/apputils-extension:notification": {"fetchNews": "false", "checkForUpdates": False}}


class ClassroomError(RuntimeError):
    """The classroom cannot start or act (not root, no npm, a port taken ...): the message says what to do."""


@dataclass
class Classroom:
    """Where a classroom lives and who is in it: the state file the hub's config reads (``state.json``)."""

    folder: Path
    instructor: str
    students: list[str]
    port: int
    hub_port: int
    proxy_api_port: int
    course_id: str
    python: str = sys.executable
    config_path: dict = field(default_factory=dict)
    server_args: dict = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def exchange(self) -> Path:
        return self.folder / "exchange"

    @property
    def passwords_file(self) -> Path:
        return self.folder / "passwords.txt"

    def course(self) -> Path:
        """The instructor's course folder."""
        return Path(pwd.getpwnam(self.instructor).pw_dir) / COURSE_FOLDER

    def role(self, user: str) -> str:
        return "instructor" if user == self.instructor else "student"

    def environment(self, user: str) -> dict[str, str]:
        """What a user's JupyterLab and terminal have: this environment's commands first on PATH, the role's config."""
        home = pwd.getpwnam(user).pw_dir
        return {"HOME": home, "USER": user, "LANG": "C.UTF-8", "PATH": f"{Path(self.python).parent}:/usr/bin:/bin",
                "JUPYTER_CONFIG_PATH": self.config_path[self.role(user)]}

    def save(self) -> Path:
        path = self.folder / "state.json"
        data = {**asdict(self), "folder": str(self.folder), "proxy": str(PROXY),
                "singleuser": str(Path(self.python).with_name("jupyterhub-singleuser"))}
        path.write_text(json.dumps(data, indent=1))
        return path


def as_user(classroom: Classroom, user: str, command: list[str], cwd: Path | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    """``command`` run as ``user`` with the environment of their JupyterLab's terminal (output captured)."""
    env = classroom.environment(user)
    return subprocess.run(["runuser", "-u", user, "--", "env", "-i", *(f"{k}={v}" for k, v in env.items()), *command],
                          cwd=cwd or env["HOME"], capture_output=True, text=True, timeout=timeout)


def start(folder: Path = DEFAULT_STATE, students: int = 2, port: int = 8750, prefix: str = "gpuc") -> Classroom:
    """Set up and start the classroom (see the module's docstring); returns it once the hub answers."""
    _require_root()
    folder = Path(folder)
    _install_proxy()
    classroom = Classroom(folder=folder, instructor=f"{prefix}-instructor", students=[f"{prefix}-student{i}" for i in range(1, students + 1)],
                          port=port, hub_port=port + 1, proxy_api_port=port + 2, course_id=_course_id())
    if _hub_running(classroom):
        raise ClassroomError(f"a classroom is already running from {folder} ({classroom.url}): `make classroom-stop` first")
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o755)
    passwords = {user: _make_user(user) for user in [classroom.instructor, *classroom.students]}
    _write_passwords(classroom, passwords)
    _make_exchange(classroom)
    _write_configs(classroom)
    _make_course(classroom)
    _check_reachable(classroom)
    _start_hub(classroom, classroom.save())
    return classroom


def stop(folder: Path = DEFAULT_STATE) -> bool:
    """Stop the hub (it stops the proxy and every user's JupyterLab first); False if none was running."""
    pid_file = Path(folder) / "jupyterhub.pid"
    try:
        pid = int(pid_file.read_text())
    except (OSError, ValueError):
        return False
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        pid_file.unlink(missing_ok=True)
        return False
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and _alive(pid):
        time.sleep(0.5)
    if _alive(pid):
        os.killpg(pid, signal.SIGKILL)
    pid_file.unlink(missing_ok=True)
    return True


# -- the parts of start ---------------------------------------------------------------------------


def _require_root() -> None:
    if os.geteuid() != 0:
        raise ClassroomError("the classroom creates local users and starts servers as them: run it as root (sudo make classroom)")
    if not shutil.which("runuser") or not shutil.which("useradd"):
        raise ClassroomError("the classroom needs useradd and runuser (Linux's shadow-utils and util-linux)")


def _install_proxy() -> None:
    """configurable-http-proxy, the version in classroom/package-lock.json, into classroom/node_modules."""
    if PROXY.exists():
        return
    if not shutil.which("npm"):
        raise ClassroomError("JupyterHub's proxy comes from the npm registry: install Node.js 18 or newer (with npm)")
    done = subprocess.run(["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=CLASSROOM_DIR, capture_output=True, text=True)
    if done.returncode != 0 or not PROXY.exists():
        raise ClassroomError(f"npm could not install configurable-http-proxy:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")


def _course_id() -> str:
    """The course id of this repository's nbgrader_config.py (the exchange files everything under it)."""
    text = (REPO_ROOT / "nbgrader_config.py").read_text()
    [line] = [line for line in text.splitlines() if line.startswith("c.CourseDirectory.course_id")]
    return line.split("=", 1)[1].strip().strip("\"'")


def _make_user(user: str) -> str:
    """Create ``user`` (with a home) if missing; give them a new random password; return it."""
    try:
        pwd.getpwnam(user)
    except KeyError:
        subprocess.run(["useradd", "--create-home", "--shell", "/bin/bash", user], check=True, capture_output=True)
    password = secrets.token_urlsafe(12)
    subprocess.run(["chpasswd"], input=f"{user}:{password}\n", text=True, check=True, capture_output=True)
    return password


def _write_passwords(classroom: Classroom, passwords: dict[str, str]) -> None:
    path = classroom.passwords_file
    path.touch(mode=0o600)
    path.chmod(0o600)
    path.write_text("".join(f"{user} {password}\n" for user, password in passwords.items()))


def _make_exchange(classroom: Classroom) -> None:
    """nbgrader's exchange: every user writes there (nbgrader makes each course's inbound and outbound inside)."""
    classroom.exchange.mkdir(exist_ok=True)
    classroom.exchange.chmod(0o777 | stat.S_ISVTX)


def _write_configs(classroom: Classroom) -> None:
    """Each role's Jupyter config folder: nbgrader_config.py (exchange, course id; the instructor's course root and
    settings), and for students JupyterLab's page config hiding nbgrader's instructor plugins."""
    shared = f"c.Exchange.root = {str(classroom.exchange)!r}\nc.CourseDirectory.course_id = {classroom.course_id!r}\n"
    # The instructor's course settings (root, source and release folders, feedback) from the course's own file,
    # so nbgrader finds the course from any folder (the Formgrader's server starts in the home folder).
    configs = {"student": shared, "instructor": f"load_subconfig({str(classroom.course() / 'nbgrader_config.py')!r})\n" + shared}
    for role, text in configs.items():
        config_dir = classroom.folder / "jupyter" / role
        config_dir.mkdir(parents=True, exist_ok=True)
        (config_dir / "nbgrader_config.py").write_text(text)
        classroom.config_path[role] = str(config_dir)
    # The Formgrader is a page of the instructor's own server shown in a frame of their JupyterLab: JupyterHub's
    # single-user servers forbid every frame unless a policy is set (jupyterhub/singleuser/extension.py, "frame-ancestors
    # 'none'" by setdefault), so the instructor's server allows frames of its own origin, as a plain Jupyter server does.
    (classroom.folder / "jupyter" / "instructor" / "jupyter_server_config.py").write_text(
        "c.ServerApp.tornado_settings = {'headers': {'Content-Security-Policy': \"frame-ancestors 'self'\"}}\n")
    for role in configs:  # JupyterLab's defaults for the classroom's users (each user may change them): no news toast
        labconfig = classroom.folder / "jupyter" / role / "labconfig"
        labconfig.mkdir(exist_ok=True)
        (labconfig / "default_setting_overrides.json").write_text(json.dumps(LAB_DEFAULTS))
    page_config = classroom.folder / "jupyter" / "student" / "labconfig" / "page_config.json"
    page_config.write_text(json.dumps({"disabledExtensions": {f"@jupyter/nbgrader:{name}": True for name in STUDENT_HIDDEN_PLUGINS}}))
    student_off = [name for name in NBGRADER_SERVER_EXTENSIONS if not name.endswith("assignment_list")]
    classroom.server_args = {"student": [f"--ServerApp.jpserver_extensions={name}=False" for name in student_off], "instructor": []}
    for path in (classroom.folder / "jupyter").rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)


def _make_course(classroom: Classroom) -> None:
    """The instructor's course folder, made once from this repository (later starts keep it: it holds the grades)."""
    course = classroom.course()
    if course.exists():
        return
    course.mkdir()
    for part in COURSE_PARTS:
        source = REPO_ROOT / part
        if source.is_dir():
            shutil.copytree(source, course / part, ignore=shutil.ignore_patterns("__pycache__", ".ipynb_checkpoints"))
        else:
            shutil.copy2(source, course / part)
    subprocess.run(["chown", "-R", f"{classroom.instructor}:", str(course)], check=True)


def _check_reachable(classroom: Classroom) -> None:
    """A student must be able to run this environment's Python and import the course's package from it."""
    student = classroom.students[0] if classroom.students else classroom.instructor
    done = as_user(classroom, student, [classroom.python, "-c", "import gpucourse, jupyterhub, nbgrader"], timeout=120)
    if done.returncode != 0:
        raise ClassroomError(f"{student} cannot use this environment ({classroom.python}): every folder above the repository needs "
                             f"o+x and its files o+r (chmod o+x ...).\n{done.stderr[-1500:]}")


def _start_hub(classroom: Classroom, state_file: Path) -> None:
    log = open(classroom.folder / "jupyterhub.log", "ab")
    env = {**os.environ, STATE_ENV: str(state_file), "PATH": f"{Path(classroom.python).parent}:{os.environ.get('PATH', '/usr/bin:/bin')}"}
    hub = subprocess.Popen([str(Path(classroom.python).with_name("jupyterhub")), "-f", str(HUB_CONFIG)], cwd=classroom.folder, env=env,
                           stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
    deadline = time.monotonic() + READY_SECONDS
    while time.monotonic() < deadline:
        if hub.poll() is not None:
            raise ClassroomError(f"JupyterHub exited ({hub.returncode}):\n{_tail(classroom.folder / 'jupyterhub.log')}")
        if _hub_running(classroom):
            return
        time.sleep(0.5)
    os.killpg(hub.pid, signal.SIGKILL)
    raise ClassroomError(f"JupyterHub did not answer within {READY_SECONDS} s:\n{_tail(classroom.folder / 'jupyterhub.log')}")


def _hub_running(classroom: Classroom) -> bool:
    try:
        with urllib.request.urlopen(f"{classroom.url}/hub/api/", timeout=2) as answer:
            return answer.status == 200
    except OSError:
        return False


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _tail(path: Path, characters: int = 3000) -> str:
    try:
        return path.read_text(errors="replace")[-characters:]
    except OSError:
        return ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m autograder.classroom", description=__doc__.splitlines()[0])
    parser.add_argument("--state", type=Path, default=DEFAULT_STATE, help=f"the classroom's folder (default {DEFAULT_STATE})")
    commands = parser.add_subparsers(dest="command", required=True)
    begin = commands.add_parser("start", help="create the users, the course and the exchange; start JupyterHub on localhost")
    begin.add_argument("--students", type=int, default=2)
    begin.add_argument("--port", type=int, default=8750, help="the hub's port (the next two are its API's and its proxy's)")
    commands.add_parser("stop", help="stop JupyterHub and every user's JupyterLab")
    args = parser.parse_args(argv)
    try:
        if args.command == "start":
            classroom = start(args.state, args.students, args.port)
            print(f"classroom: {classroom.url} (localhost only); users and passwords in {classroom.passwords_file};\n"
                  f"the instructor's course: {classroom.course()}; stop it with `make classroom-stop`")
        else:
            print("classroom stopped" if stop(args.state) else "no classroom was running")
    except ClassroomError as error:
        print(f"classroom: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
