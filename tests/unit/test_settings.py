"""Settings from the environment, a TOML file and keyword arguments; per-language limits; the
docs/configuration.md's settings table. Real files, real environment variables, the real runtime specs."""

from __future__ import annotations

import re
import tomllib

import pytest

from sandbox.api.schemas import RunCodeRequest
from sandbox.api.translate import InvalidRequest, build_job
from sandbox.config import CONFIG_ENV, REPO_ROOT, ConfigError, Settings, load_settings
from sandbox.config_docs import TABLE_BEGIN, TABLE_END, effective_toml, markdown_table
from sandbox.runtimes import RuntimeRegistry

CONFIGURATION_DOC = REPO_ROOT / "docs" / "configuration.md"


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch):
    """No SANDBOX_* setting from the shell running the tests may leak into these."""
    import os

    for name in list(os.environ):
        if name.upper().startswith("SANDBOX_") and not name.upper().startswith("SANDBOX_TESTS_"):
            monkeypatch.delenv(name)


@pytest.fixture
def config_file(tmp_path, monkeypatch):
    """Write ``text`` as the config file named by SANDBOX_CONFIG; return its path."""
    def write(text: str):
        path = tmp_path / "sandbox.toml"
        path.write_text(text)
        monkeypatch.setenv(CONFIG_ENV, str(path))
        return path
    return write


def test_defaults_without_environment_or_file():
    settings = Settings()
    assert (settings.port, settings.max_memory_mb, settings.config, settings.languages) == \
        (8080, 4096, None, {})


def test_environment_variables_set_settings(monkeypatch):
    monkeypatch.setenv("SANDBOX_PORT", "9001")
    monkeypatch.setenv("SANDBOX_CPUS", "2.5")
    monkeypatch.setenv("SANDBOX_NETWORK", "true")
    settings = Settings()
    assert (settings.port, settings.cpus, settings.network) == (9001, 2.5, True)


def test_a_toml_file_sets_settings(config_file):
    path = config_file('port = 9002\nbackend = "docker"\nmax_memory_mb = 8192\n'
                       'state_dir = "/srv/sandbox"\n')
    settings = Settings()
    assert settings.config == path
    assert (settings.port, settings.backend, settings.max_memory_mb, str(settings.state_dir)) == \
        (9002, "docker", 8192, "/srv/sandbox")


def test_precedence_is_kwargs_then_environment_then_file_then_defaults(config_file, monkeypatch):
    config_file("port = 1111\nmax_queue = 2222\nmax_memory_mb = 3333\n")
    monkeypatch.setenv("SANDBOX_PORT", "4444")
    monkeypatch.setenv("SANDBOX_MAX_QUEUE", "5555")
    settings = Settings(port=6666)
    assert settings.port == 6666            # keyword beats environment and file
    assert settings.max_queue == 5555       # environment beats file
    assert settings.max_memory_mb == 3333   # file beats default
    assert settings.pids_limit == 256       # default


def test_the_config_file_can_be_named_by_keyword(tmp_path, monkeypatch):
    (tmp_path / "a.toml").write_text("port = 1\n")
    (tmp_path / "b.toml").write_text("port = 2\n")
    monkeypatch.setenv(CONFIG_ENV, str(tmp_path / "a.toml"))
    assert Settings(config=tmp_path / "b.toml").port == 2  # as `--config` does: it wins


@pytest.mark.parametrize("text, fragments", [
    ("max_memmory_mb = 1\n", ["unknown setting 'max_memmory_mb'", "did you mean 'max_memory_mb'"]),
    ("colour = 'blue'\n", ["unknown setting 'colour'", "known settings: ", "max_memory_mb"]),
    ("[languages.java]\nmemroy_mb = 1\n",
     ["[languages.java] 'memroy_mb'", "did you mean 'memory_mb'"]),
    ("config = 'other.toml'\n", ["`config` cannot be set inside the config file"]),
    ("port = \n", ["is not valid TOML"]),
    ("languages = 3\n", ["`languages` must be tables"]),
])
def test_a_bad_config_file_is_refused_naming_the_problem(config_file, text, fragments):
    path = config_file(text)
    with pytest.raises(ConfigError) as exc:
        Settings()
    for fragment in fragments:
        assert fragment in str(exc.value)
    assert str(path) in str(exc.value)


def test_a_missing_config_file_is_an_error_not_an_empty_config(tmp_path, monkeypatch):
    monkeypatch.setenv(CONFIG_ENV, str(tmp_path / "nowhere.toml"))
    with pytest.raises(ConfigError, match="nowhere.toml does not exist"):
        Settings()


def test_an_unknown_language_lists_the_served_ones(config_file):
    config_file("[languages.cobol]\nmemory_mb = 512\n")
    with pytest.raises(ConfigError) as exc:
        load_settings()
    assert "'cobol' is not served here" in str(exc.value)
    assert "served languages: D_ut, R, bash, c, cpp, csharp, cuda, go" in str(exc.value)


def test_invalid_values_are_reported_with_their_setting(config_file, monkeypatch):
    config_file("[languages.java]\ncpus = -1\n")
    with pytest.raises(ConfigError, match=r"languages\.java\.cpus: Input should be greater than or equal to 0.01"):
        load_settings()
    monkeypatch.setenv("SANDBOX_PORT", "eighty")
    monkeypatch.delenv(CONFIG_ENV)
    with pytest.raises(ConfigError, match=r"port: .*valid integer.*'eighty'"):
        load_settings()


def test_an_override_default_above_its_ceiling_is_refused(config_file):
    config_file("max_memory_mb = 2048\n[languages.java]\nmemory_mb = 3072\n")
    with pytest.raises(ConfigError, match="memory_mb 3072 is above the java ceiling of 2048 MB"):
        load_settings()
    config_file("max_memory_mb = 2048\n[languages.java]\nmemory_mb = 3072\nmax_memory_mb = 4096\n")
    assert load_settings().for_language("java", 2048).memory_mb == 3072


def test_per_language_overrides_from_file_and_environment_merge(config_file, monkeypatch):
    config_file("cpus = 1.5\n[languages.java]\nmemory_mb = 3072\nmax_timeout_s = 60\n")
    monkeypatch.setenv("SANDBOX_LANGUAGES__JAVA__PIDS_LIMIT", "512")
    monkeypatch.setenv("SANDBOX_LANGUAGES__GO__CPUS", "2")
    settings = Settings()
    java = settings.for_language("java", 2048)
    assert (java.memory_mb, java.max_timeout_s, java.pids_limit, java.cpus) == (3072, 60, 512, 1.5)
    assert java.overridden == {"memory_mb", "max_timeout_s", "pids_limit"}
    go = settings.for_language("go", 1024)
    assert (go.memory_mb, go.cpus, go.max_memory_mb) == (1024, 2.0, 4096)


def test_without_overrides_a_language_gets_its_spec_default_capped_by_the_ceiling():
    settings = Settings(max_memory_mb=1536)
    assert settings.for_language("cpp", 2048).memory_mb == 1536
    assert settings.for_language("python", 1024).memory_mb == 1024


def _job(settings: Settings, **request):
    registry = RuntimeRegistry.load(REPO_ROOT / "runtimes")
    return build_job(RunCodeRequest(code="x", **request), registry, settings)


def test_build_job_applies_the_language_overrides(config_file):
    config_file("[languages.java]\nmemory_mb = 3072\ncpus = 2\npids_limit = 1024\n"
                "output_limit_bytes = 65536\n")
    settings = Settings()
    java = _job(settings, language="java").limits
    assert (java.memory_mb, java.cpus, java.pids, java.output_bytes) == (3072, 2.0, 1024, 65536)
    python = _job(settings, language="python").limits
    assert (python.memory_mb, python.cpus, python.pids, python.output_bytes) == \
        (1024, 1.0, 256, 8 << 20)


def test_a_language_ceiling_refuses_requests_and_names_the_setting_to_change(config_file):
    config_file("[languages.python]\nmax_memory_mb = 512\nmax_timeout_s = 12\n")
    settings = Settings()
    with pytest.raises(InvalidRequest, match=r"ceiling of 512 MB for python "
                                             r"\(\[languages.python\] max_memory_mb\)"):
        _job(settings, language="python", memory_limit_MB=600)
    with pytest.raises(InvalidRequest, match=r"ceiling of 12 s for python "
                                             r"\(\[languages.python\] max_timeout_s\)"):
        _job(settings, language="python", run_timeout=13)
    assert _job(settings, language="python").limits.memory_mb == 512  # its default, capped
    assert _job(settings, language="cpp", memory_limit_MB=600).limits.memory_mb == 600
    with pytest.raises(InvalidRequest, match=r"ceiling of 4096 MB for cpp \(SANDBOX_MAX_MEMORY_MB\)"):
        _job(settings, language="cpp", memory_limit_MB=5000)


def test_effective_toml_loads_back_to_the_same_settings(config_file, monkeypatch, tmp_path):
    config_file("port = 9003\n[languages.rust]\nmemory_mb = 1500\n")
    monkeypatch.setenv("SANDBOX_INSTANCE", 'odd "name"')
    settings = Settings()
    text = effective_toml(settings)
    assert re.search(r'^instance = "odd \\"name\\""  # from SANDBOX_INSTANCE$', text, re.M)
    assert re.search(r"^port = 9003  # from .*sandbox.toml$", text, re.M)
    assert "# from" not in next(line for line in text.splitlines() if line.startswith("cpus"))
    by_keyword = effective_toml(Settings(max_queue=5))  # neither environment nor file
    assert "\nmax_queue = 5\n" in by_keyword
    monkeypatch.delenv("SANDBOX_INSTANCE")
    again = tmp_path / "again.toml"
    again.write_text(text)
    reloaded = Settings(config=again)
    assert reloaded.model_dump(exclude={"config"}) == settings.model_dump(exclude={"config"})
    assert tomllib.loads(text)["languages"] == {"rust": {"memory_mb": 1500}}


def _docs_table() -> str:
    text = CONFIGURATION_DOC.read_text()
    assert TABLE_BEGIN in text and TABLE_END in text, \
        "docs/configuration.md lacks the generated settings table; paste `python -m sandbox config --markdown`"
    start = text.index(TABLE_BEGIN)
    return text[start:text.index(TABLE_END, start) + len(TABLE_END)] + "\n"


def test_every_setting_is_in_the_docs_table():
    table = _docs_table()
    missing = [f"SANDBOX_{name.upper()}" for name in Settings.model_fields
               if f"| `SANDBOX_{name.upper()}` |" not in table]
    assert not missing, (f"docs/configuration.md's settings table lacks {', '.join(missing)}; regenerate it "
                         f"with `python -m sandbox config --markdown`")


def test_the_docs_table_is_the_generated_one():
    assert _docs_table() == markdown_table(), \
        "docs/configuration.md's settings table is out of date; regenerate it with " \
        "`python -m sandbox config --markdown` and paste it over the old one"


def test_unknown_sandbox_variables_are_found_with_the_setting_meant(monkeypatch):
    from sandbox.config import unknown_environment_settings

    monkeypatch.setenv("SANDBOX_MAX_MEMMORY_MB", "1")
    monkeypatch.setenv("SANDBOX_ZZZ", "1")
    monkeypatch.setenv("SANDBOX_PORT", "1")                       # a setting
    monkeypatch.setenv("SANDBOX_LANGUAGES__JAVA__CPUS", "2")      # a per-language one
    assert unknown_environment_settings() == [("SANDBOX_MAX_MEMMORY_MB", "SANDBOX_MAX_MEMORY_MB"),
                                              ("SANDBOX_ZZZ", None)]


def test_the_docs_config_example_loads_and_means_what_it_says(tmp_path):
    section = CONFIGURATION_DOC.read_text().split("# Configuration", 1)[1]
    example = section.split("```toml\n", 1)[1].split("```", 1)[0]
    path = tmp_path / "example.toml"
    path.write_text(example)
    settings = load_settings(config=path)
    java = settings.for_language("java", 2048)
    assert (java.memory_mb, java.max_memory_mb, java.pids_limit, java.cpus) == (3072, 6144, 1024, 2)
    assert settings.for_language("python", 1024).max_timeout_s == 30
