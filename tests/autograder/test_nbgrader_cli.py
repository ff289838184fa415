"""autograder.nbgrader_cli: new gradebooks start from a template, without nbgrader's alembic subprocess."""

import sqlite3

from autograder import nbgrader_cli


def test_the_empty_gradebook_is_at_nbgraders_last_migration_with_no_course(tmp_path, monkeypatch):
    from alembic.script import ScriptDirectory
    from nbgrader import dbutil

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    template = nbgrader_cli.empty_gradebook()
    assert template.parent == tmp_path / "cache" / "gpucourse"
    with sqlite3.connect(template) as connection:
        [(version,)] = connection.execute("SELECT version_num FROM alembic_version").fetchall()
        assert connection.execute("SELECT COUNT(*) FROM course").fetchone() == (0,)
    assert version == ScriptDirectory(dbutil.ALEMBIC_DIR).get_current_head()
    assert nbgrader_cli.empty_gradebook() == template  # made once


def test_a_copy_opens_as_a_gradebook_of_the_course_that_opens_it(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    course = tmp_path / "course"
    course.mkdir()
    (course / "gradebook.db").write_bytes(nbgrader_cli.empty_gradebook().read_bytes())
    with nbgrader_cli.open_gradebook(course) as gradebook:
        gradebook.add_student("ann")
        assert [student.id for student in gradebook.students] == ["ann"]
