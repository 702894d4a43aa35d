import pytest

from sandbox.config import REPO_ROOT
from sandbox.runtimes import RuntimeRegistry, RuntimeSpecError, UnknownLanguage

EXPECTED_DEFAULTS = {"python": 1024, "cpp": 2048, "java": 2048, "nodejs": 512, "go": 1024,
                     "sql": 512, "rust": 1024, "bash": 512}
# SandboxFusion's (and verl's SUPPORTED_LANGUAGES) ids, case-sensitive.
SANDBOXFUSION_IDS = {
    "python", "cpp", "nodejs", "go", "go_test", "java", "php", "csharp", "bash", "typescript",
    "sql", "rust", "cuda", "lua", "R", "perl", "D_ut", "ruby", "scala", "julia", "pytest",
    "junit", "kotlin_script", "jest", "verilog", "python_gpu", "lean", "swift", "racket"}
# No toolchain reachable: a clear SandboxError.
UNAVAILABLE = {"lean"}
# Need the host's GPUs; their image is opt-in (not among the images every server needs).
GPU = {"cuda", "python_gpu"}


def test_every_sandboxfusion_id_has_a_spec_with_an_image_or_a_reason():
    registry = RuntimeRegistry.load(REPO_ROOT / "runtimes")
    assert set(registry.languages) == SANDBOXFUSION_IDS | {"c"}
    for spec in registry:
        if spec.language in UNAVAILABLE:
            assert not spec.buildable and spec.unavailable
            continue
        assert spec.buildable and spec.smoke is not None
        assert spec.memory_mb == EXPECTED_DEFAULTS.get(spec.language, spec.memory_mb)
        assert (REPO_ROOT / spec.dockerfile / "Dockerfile").is_file()
        assert spec.gpu == (spec.language in GPU) and spec.project == (spec.language in GPU)
    assert registry.get("cpp").compiled and not registry.get("python").compiled
    assert registry.get("java").source == "Main.java"
    # Several ids share a toolchain's image.
    assert registry.get("pytest").image == registry.get("python").image
    assert {registry.get(x).image for x in ("java", "junit", "scala", "kotlin_script")} == \
        {registry.get("java").image}
    assert len(registry.images) < len(registry.runnable)
    assert registry.gpu_images == ["sandbox-cuda:1"] and "sandbox-cuda:1" not in registry.images
    # SandboxFusion's meaning: cmake + make, then ./build/main; compile.py, then run.py.
    cuda, python_gpu = registry.get("cuda"), registry.get("python_gpu")
    assert (cuda.compile, cuda.run, cuda.source) == (("cuda-build",), ("./build/main",), "main.cu")
    assert (python_gpu.compile, python_gpu.run, python_gpu.source) == \
        (("python3", "compile.py"), ("python3", "run.py"), "run.py")
    build = (REPO_ROOT / "images" / "cuda" / "cuda-build").read_text().splitlines()
    assert ["mkdir build", "cd build", "cmake ..", "exec make -j 4"] == build[-4:]

def test_without_gpus_the_gpu_ids_answer_why_and_the_others_are_untouched():
    registry = RuntimeRegistry.load(REPO_ROOT / "runtimes")
    served = registry.without_gpus("it needs an NVIDIA GPU")
    for spec in served:
        if spec.language in GPU:
            assert spec.unavailable == "it needs an NVIDIA GPU" and not spec.buildable
        else:
            assert spec == registry.get(spec.language)
    assert served.images == registry.images and served.gpu_images == []
    assert served.aliases == registry.aliases


def _job(spec, code, files):
    from sandbox.engine.models import Job, Limits

    return Job(spec=spec, code=code, stdin=b"", files=files, fetch_files=(),
               limits=Limits(10, 10, 256, 1.0, 64, 64, 1 << 20, 0))


def test_a_project_runtime_writes_the_code_only_where_the_files_leave_room():
    registry = RuntimeRegistry.load(REPO_ROOT / "runtimes")
    cuda, cpp = registry.get("cuda"), registry.get("cpp")
    cmake = {"CMakeLists.txt": b"project(main)"}
    # SandboxFusion sends the whole project in `files` and an empty code: nothing else is written.
    assert _job(cuda, "", {**cmake, "main.cu": b"int main(){}"}).inputs == \
        {**cmake, "main.cu": b"int main(){}"}
    assert _job(cuda, "", cmake).inputs == cmake
    # The code is main.cu when the files have none; the files' own main.cu wins over it.
    assert _job(cuda, "__global__ void k(){}", cmake).inputs == {**cmake, "main.cu": b"__global__ void k(){}"}
    assert _job(cuda, "ignored", {"main.cu": b"kept"}).inputs == {"main.cu": b"kept"}
    # Other runtimes always write the code, empty or not.
    assert _job(cpp, "", {}).inputs == {"main.cpp": b""}


def test_a_spec_without_an_image_must_say_why(tmp_path):
    (tmp_path / "cobol.toml").write_text('language = "cobol"\n')
    with pytest.raises(RuntimeSpecError, match="or `unavailable`"):
        RuntimeRegistry.load(tmp_path)
    (tmp_path / "cobol.toml").write_text('language = "cobol"\nunavailable = "no compiler"\n')
    registry = RuntimeRegistry.load(tmp_path)
    assert registry.images == [] and registry.runnable == []


def test_ids_sharing_an_image_share_its_build_folder(tmp_path):
    spec = (REPO_ROOT / "runtimes" / "python.toml").read_text()
    (tmp_path / "python.toml").write_text(spec)
    (tmp_path / "pytest.toml").write_text(
        spec.replace('language = "python"', 'language = "pytest"').replace(
            'aliases = ["py", "python3"]', "").replace('dockerfile = "images/python"',
                                                       'dockerfile = "images/other"'))
    with pytest.raises(RuntimeSpecError, match="share image sandbox-python:1"):
        RuntimeRegistry.load(tmp_path)


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
                            "javascript": "nodejs", "c++": "cpp", "sh": "bash",
                            "ts": "typescript"}.items():
        assert registry.get(alias).language == language
    assert "py" not in registry.languages
    spec = (REPO_ROOT / "runtimes" / "bash.toml").read_text()
    (tmp_path / "bash.toml").write_text(spec)
    (tmp_path / "zsh.toml").write_text(spec.replace('language = "bash"', 'language = "zsh"'))
    with pytest.raises(RuntimeSpecError, match="'sh' is already"):
        RuntimeRegistry.load(tmp_path)


def test_a_std_default_must_be_a_choice_and_in_the_compile_argv(tmp_path):
    spec = (REPO_ROOT / "runtimes" / "cpp.toml").read_text()
    (tmp_path / "cpp.toml").write_text(spec.replace('std_default = "c++17"', 'std_default = "c++20x"'))
    with pytest.raises(RuntimeSpecError, match="std_default 'c\\+\\+20x' must be one of"):
        RuntimeRegistry.load(tmp_path)
    (tmp_path / "cpp.toml").write_text(spec.replace('"-std=gnu++17", "-O2"', '"-O2"'))
    with pytest.raises(RuntimeSpecError, match="compile must contain std_default's flags"):
        RuntimeRegistry.load(tmp_path)


def test_the_java_zygote_runs_with_the_run_s_jvm_flags():
    """Java tests in /v1/evaluate run in the zygote's JVM, which applies no per-test -X flag:
    its flags must be the ones `java Main` gets (memory, stack, GC)."""
    java = RuntimeRegistry.load(REPO_ROOT / "runtimes").get("java")
    assert java.zygote[0] == java.run[0] == "java"
    def jvm_flags(argv):  # where its classes come from (a CDS archive) is not a test's business
        return [a for a in argv if a.startswith("-X") and not a.startswith("-XX:SharedArchiveFile=")]
    assert jvm_flags(java.zygote) == jvm_flags(java.run)


def test_a_runtime_may_fix_its_own_stack_limit():
    from sandbox.engine.models import Limits
    registry = RuntimeRegistry.load(REPO_ROOT / "runtimes")
    assert registry.get("ruby").stack_mb == 8
    default = Limits(10, 10, 1024, 1.0, 64, 64, 1 << 20, 0)
    assert default.stack_bytes == 256 << 20  # min(256 MB, half the cap)
    assert Limits(10, 10, 256, 1.0, 64, 64, 1 << 20, 0).stack_bytes == 128 << 20
    assert Limits(10, 10, 512, 1.0, 64, 64, 1 << 20, 0, stack_mb=8).stack_bytes == 8 << 20
