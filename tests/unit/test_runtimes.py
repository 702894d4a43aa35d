import pytest

from sandbox.config import REPO_ROOT
from sandbox.runtimes import RuntimeRegistry, RuntimeSpecError, UnknownLanguage

EXPECTED_DEFAULTS = {"python": 1024, "cpp": 2048, "java": 2048, "nodejs": 512, "go": 1024,
                     "sql": 512, "rust": 1024, "bash": 512}


def test_every_served_language_has_a_valid_spec_and_its_default_memory():
    registry = RuntimeRegistry.load(REPO_ROOT / "runtimes")
    assert sorted(registry.languages) == sorted(EXPECTED_DEFAULTS)
    for spec in registry:
        assert spec.memory_mb == EXPECTED_DEFAULTS[spec.language]
        assert (REPO_ROOT / spec.dockerfile / "Dockerfile").is_file()
    assert registry.get("cpp").compiled and not registry.get("python").compiled
    assert registry.get("java").source == "Main.java"


def test_unknown_language_lists_the_served_ones():
    registry = RuntimeRegistry.load(REPO_ROOT / "runtimes")
    with pytest.raises(UnknownLanguage) as exc:
        registry.get("cobol")
    assert "python" in str(exc.value) and "cobol" in str(exc.value)


def test_a_broken_spec_is_reported_with_its_file(tmp_path):
    (tmp_path / "bad.toml").write_text('language = "bad"\nimage = "x"\n')
    with pytest.raises(RuntimeSpecError, match="bad.toml"):
        RuntimeRegistry.load(tmp_path)
    (tmp_path / "bad.toml").write_text("not toml [")
    with pytest.raises(RuntimeSpecError, match="bad.toml"):
        RuntimeRegistry.load(tmp_path)


def test_aliases_resolve_to_their_language_and_may_not_collide(tmp_path):
    registry = RuntimeRegistry.load(REPO_ROOT / "runtimes")
    for alias, language in {"py": "python", "python3": "python", "js": "nodejs",
                            "javascript": "nodejs", "c++": "cpp", "sh": "bash"}.items():
        assert registry.get(alias).language == language
    assert "py" not in registry.languages
    spec = (REPO_ROOT / "runtimes" / "bash.toml").read_text()
    (tmp_path / "bash.toml").write_text(spec)
    (tmp_path / "zsh.toml").write_text(spec.replace('language = "bash"', 'language = "zsh"'))
    with pytest.raises(RuntimeSpecError, match="'sh' is already"):
        RuntimeRegistry.load(tmp_path)
