"""When `sandbox images build` may skip a language image: only when nothing it is built from changed."""

from __future__ import annotations

from sandbox.images import context_digest


def test_the_same_files_and_base_give_the_same_digest(tmp_path):
    (tmp_path / "Dockerfile").write_text("FROM x\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "tool").write_text("#!/bin/sh\n")
    assert context_digest(tmp_path, "sha256:a") == context_digest(tmp_path, "sha256:a")


def test_any_change_to_what_the_image_is_built_from_changes_the_digest(tmp_path):
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text("FROM x\n")
    tool = tmp_path / "tool"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o644)
    seen = {context_digest(tmp_path, "sha256:a")}
    seen.add(context_digest(tmp_path, "sha256:b"))          # another base image
    dockerfile.write_text("FROM x\nRUN true\n")
    seen.add(context_digest(tmp_path, "sha256:a"))          # a changed file
    tool.chmod(0o755)
    seen.add(context_digest(tmp_path, "sha256:a"))          # a changed mode
    tool.rename(tmp_path / "tool2")
    seen.add(context_digest(tmp_path, "sha256:a"))          # a renamed file
    (tmp_path / "extra").write_text("")
    seen.add(context_digest(tmp_path, "sha256:a"))          # a new (empty) file
    assert len(seen) == 6


def test_the_specs_a_build_takes_every_runnable_id_once(capsys):
    from sandbox.config import Settings
    from sandbox.images import _specs, by_image

    specs = _specs(None, Settings())
    languages = [spec.language for spec in specs]
    assert len(languages) == len(set(languages)) and "cpp" in languages and "lean" not in languages
    assert "[lean] no image:" in capsys.readouterr().out
    assert [s.language for s in _specs(["c++", "cpp", "c"], Settings())] == ["cpp", "c"]
    assert {s.language for s in by_image(specs)["sandbox-java:1"]} == {"java", "junit", "scala", "kotlin_script"}
