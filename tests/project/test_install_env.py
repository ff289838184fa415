"""scripts/install_env.py: uv is sent wherever pip is configured to look."""

import importlib.util

from course_helpers import REPO_ROOT

spec = importlib.util.spec_from_file_location("install_env", REPO_ROOT / "scripts" / "install_env.py")
install_env = importlib.util.module_from_spec(spec)
spec.loader.exec_module(install_env)


def test_pip_locations_are_handed_to_uv_with_the_environment_overriding_the_files():
    listed = ("global.cert='/etc/ssl/certs/ca-certificates.crt'\n"
              "global.extra-index-url='file:///opt/pypi/simple file:///opt/pypi-more/simple'\n"
              "global.find-links='/opt/old'\n"
              ":env:.find-links='/opt/wheels'\n")
    assert install_env.uv_location_options(listed) == [
        "--extra-index-url", "file:///opt/pypi/simple", "--extra-index-url", "file:///opt/pypi-more/simple",
        "--find-links", "/opt/wheels", "--index-strategy", "unsafe-best-match",
    ]


def test_without_pip_configuration_uv_uses_its_defaults():
    assert install_env.uv_location_options("global.cert='/etc/ssl/certs/ca-certificates.crt'\n") == []


def test_the_courses_own_packages_are_byte_compiled(tmp_path):
    """Installed editable, they stay in the repository, outside what the installer byte-compiles."""
    (tmp_path / "pyproject.toml").write_text('[tool.setuptools]\npackages = ["top", "top.sub"]\n')
    for package in ("top", "top/sub"):
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("VALUE = 1\n")
    (tmp_path / "top" / "sub" / "deeper").mkdir()
    (tmp_path / "top" / "sub" / "deeper" / "__init__.py").write_text("")  # not a listed package
    install_env.compile_own_packages(tmp_path)
    compiled = sorted(str(path.relative_to(tmp_path).parent.parent) for path in tmp_path.rglob("*.pyc"))
    assert compiled == ["top", "top/sub"]
