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
