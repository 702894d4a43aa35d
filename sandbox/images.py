"""Build the language images: a Debian trixie root, the base image, then the images the runtime
specs name (several ids may share one: python and pytest), a few at once.

Where no registry answers, the root comes from Debian's own packages (debootstrap) and is
imported into Docker. Every image is labelled with its toolchain's version and smoke-tested
through the real engine before it counts as built.
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
import io
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Iterable

import docker
import docker.errors

from .config import REPO_ROOT, Settings
from .runtimes import RuntimeRegistry, RuntimeSpec

ROOTFS_IMAGE = "sandbox-rootfs:trixie"
BASE_IMAGE = "sandbox-base:1"
REGISTRY_ROOTFS = ("debian", "trixie-slim")
DEBIAN_MIRROR = "http://deb.debian.org/debian"
LABEL_PREFIX = "llm-sandbox"
ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*m")
# Language images built at once (`sandbox images build --jobs N`, `make images JOBS=N`).
DEFAULT_BUILD_JOBS = 3
# images/cuda as built here (README: Languages).
GPU_IMAGE_SIZE = "11 GB"


class BuildFailed(RuntimeError):
    pass


_say_lock = threading.Lock()


def say(message: str) -> None:
    # One write per line: images build in threads, and print() writes the newline apart.
    with _say_lock:
        sys.stdout.write(message + "\n")
        sys.stdout.flush()


def _image_exists(api: docker.APIClient, image: str) -> bool:
    try:
        api.inspect_image(image)
        return True
    except docker.errors.ImageNotFound:
        return False


def ensure_rootfs(api: docker.APIClient) -> None:
    if _image_exists(api, ROOTFS_IMAGE):
        say(f"[rootfs] {ROOTFS_IMAGE} present, reused")
        return
    repo, tag = REGISTRY_ROOTFS
    try:
        say(f"[rootfs] pulling {repo}:{tag}")
        api.pull(repo, tag=tag)
        api.tag(f"{repo}:{tag}", *ROOTFS_IMAGE.split(":"))
        return
    except docker.errors.APIError as exc:
        say(f"[rootfs] no registry ({str(exc.explanation or exc)[:120]}); bootstrapping from Debian packages")
    _debootstrap_and_import(api)


def _debootstrap_and_import(api: docker.APIClient) -> None:
    if shutil.which("debootstrap") is None:
        raise BuildFailed("debootstrap is not installed and no registry answers: "
                          "run `apt-get install -y debootstrap` (as root) and try again")
    with tempfile.TemporaryDirectory(prefix="sandbox-rootfs-") as tmp:
        root = Path(tmp) / "root"
        say("[rootfs] debootstrap --variant=minbase trixie (about 30 s)")
        proc = subprocess.run(
            ["debootstrap", "--variant=minbase", "trixie", str(root), DEBIAN_MIRROR],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if proc.returncode != 0:
            raise BuildFailed("debootstrap failed (it needs root and the Debian mirror):\n"
                              + proc.stdout[-2000:])
        for junk in ("usr/share/doc", "usr/share/man", "usr/share/locale", "usr/share/info",
                     "var/cache/apt/archives", "var/lib/apt/lists"):
            shutil.rmtree(root / junk, ignore_errors=True)
        say(f"[rootfs] importing into Docker as {ROOTFS_IMAGE}")
        tar = subprocess.Popen(["tar", "-C", str(root), "-c", "."], stdout=subprocess.PIPE)
        try:
            api.import_image_from_stream(tar.stdout, repository=ROOTFS_IMAGE.split(":")[0],
                                         tag=ROOTFS_IMAGE.split(":")[1])
        finally:
            tar.stdout.close()
            tar.wait()


def _build(api: docker.APIClient, tag: str, label: str, *, path: str | None = None,
           fileobj: io.BytesIO | None = None, buildargs: dict | None = None,
           labels: dict | None = None) -> None:
    stream = api.build(path=path, fileobj=fileobj, tag=tag, buildargs=buildargs or {},
                       labels=labels, rm=True, forcerm=True, decode=True, pull=False)
    # The lines before a failed step say why (apt's "Unable to locate package x"); with
    # several builds interleaving their output, the error repeats them.
    recent: collections.deque[str] = collections.deque(maxlen=6)
    for chunk in stream:
        if "error" in chunk:
            hint = "\n  " + "\n  ".join(recent) if recent else ""
            if chunk["error"].startswith("ADD failed"):
                hint = ("\nThe Docker daemon downloads that file itself: dockerd must reach the "
                        "address (behind a proxy, give dockerd HTTPS_PROXY: "
                        "https://docs.docker.com/engine/daemon/proxy/)")
            raise BuildFailed(f"[{label}] build failed: {chunk['error'].strip()}{hint}")
        line = chunk.get("stream", "").rstrip()
        if line:
            for part in line.splitlines():
                say(f"[{label}] {part}")
                recent.append(ANSI_ESCAPE.sub("", part))


def toolchain_version(client: docker.DockerClient, spec: RuntimeSpec) -> str:
    try:
        out = client.containers.run(spec.image, list(spec.version), remove=True, network_mode="none",
                                    stdout=True, stderr=True, user="65534:65534")
    except docker.errors.ContainerError as exc:
        detail = (exc.stderr or b"").decode(errors="replace").strip()[-300:]
        raise BuildFailed(f"[{spec.language}] the version command {list(spec.version)} failed in "
                          f"{spec.image} (exit {exc.exit_status}): {detail}; fix `version` in "
                          f"runtimes/{spec.language}.toml") from None
    lines = out.decode(errors="replace").strip().splitlines()
    return lines[0].strip()[:64] if lines else "(no version printed)"


def context_digest(folder: Path, base_id: str) -> str:
    """What a language image is made of: its build folder's files (names, modes, contents) and
    the base image it starts from."""
    digest = hashlib.sha256(base_id.encode())
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        digest.update(b"\0%s\0%o\0" % (path.relative_to(folder).as_posix().encode(),
                                        path.stat().st_mode & 0o7777))
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def _labels(api: docker.APIClient, image: str) -> dict[str, str]:
    try:
        return api.inspect_image(image)["Config"]["Labels"] or {}
    except docker.errors.ImageNotFound:
        return {}


def toolchain_label(language: str) -> str:
    return f"{LABEL_PREFIX}.toolchain.{language}"


def image_toolchain(labels: dict[str, str], language: str) -> str | None:
    """The toolchain version an image's labels record for ``language`` (images built before
    several languages shared one carry a single `toolchain` label)."""
    return labels.get(toolchain_label(language)) or labels.get(f"{LABEL_PREFIX}.toolchain")


LOCAL_CA_FOLDER = Path("/usr/local/share/ca-certificates")


def local_ca_certificates() -> str:
    """The certificate authorities this host added to its trust store (Debian keeps them in
    /usr/local/share/ca-certificates), as PEM text. Behind an intercepting proxy they are what
    makes https work; a build's npm and pip steps get them as the EXTRA_CA_CERTS build
    argument (certificates are public; the final images do not keep them)."""
    if not LOCAL_CA_FOLDER.is_dir():
        return ""
    return "".join(path.read_text(errors="replace").strip() + "\n"
                   for path in sorted(LOCAL_CA_FOLDER.rglob("*.crt")) if path.is_file())


def build_image(client: docker.DockerClient, image: str, specs: list[RuntimeSpec]) -> dict[str, str]:
    """Build one language image (skipped when its build folder and base are unchanged) and
    label it with the toolchain version of each language it serves; language -> version."""
    api = client.api
    label = "/".join(spec.language for spec in specs)
    folder = REPO_ROOT / specs[0].dockerfile
    context = context_digest(folder, api.inspect_image(BASE_IMAGE)["Id"])
    labels = _labels(api, image)
    if labels.get(f"{LABEL_PREFIX}.context") == context and \
            all(toolchain_label(spec.language) in labels for spec in specs):
        # Not even a cached rebuild: a Dockerfile's ADD of a URL downloads at every build.
        say(f"[{label}] {image} is up to date (same build files, same base image)")
        return {spec.language: labels[toolchain_label(spec.language)] for spec in specs}
    _build(api, image, label, path=str(folder),
           buildargs={"BASE": BASE_IMAGE, "EXTRA_CA_CERTS": local_ca_certificates()})
    versions = {spec.language: toolchain_version(client, spec) for spec in specs}
    # A second, metadata-only step: the labels carry the versions the toolchains report.
    _build(api, image, label, fileobj=io.BytesIO(f"FROM {image}\n".encode()),
           labels={f"{LABEL_PREFIX}.languages": ",".join(versions),
                   **{toolchain_label(lang): version for lang, version in versions.items()},
                   f"{LABEL_PREFIX}.build-folder": specs[0].dockerfile,
                   f"{LABEL_PREFIX}.context": context})
    return versions


async def smoke_test(specs: Iterable[RuntimeSpec], settings: Settings,
                     skipped: set[str] | None = None) -> dict[str, str]:
    """Run each runtime's smoke program through every backend this host can run; return
    failures. GPU runtimes on a backend without GPUs are left out (added to ``skipped``)."""
    from .engine import Engine
    from .engine.backends.docker import DockerBackend
    from .engine.backends.oci import OciBackend
    from .engine.backends.select import BackendUnavailable, choose_backend
    from .engine.gpu import NOT_CHECKED, docker_gpu_access

    instance = f"{settings.instance}-imagebuild"
    specs = list(specs)
    gpu = docker_gpu_access(settings.gpus) if any(spec.gpu for spec in specs) else NOT_CHECKED
    backends = [DockerBackend(instance=instance, gpu=gpu)]
    try:
        chosen = choose_backend(settings.model_copy(update={"instance": instance}))
        if isinstance(chosen, OciBackend):
            backends.append(chosen)  # also unpacks each image's root for it
    except BackendUnavailable as exc:
        say(f"(oci backend not smoke-tested: {exc})")
    failures: dict[str, str] = {}
    for backend in backends:
        # Every smoke test is queued at once: none may time out waiting for its turn.
        engine = Engine(backend, max_concurrency=2, queue_timeout_s=3600)
        label = getattr(backend, "description", backend.name)

        async def probe(spec: RuntimeSpec) -> None:
            if spec.gpu and not backend.gpu.available:
                # Not a failure: a GPU image can be built anywhere, but runs only on a GPU host.
                say(f"[{spec.language}] smoke test skipped on {label}: {backend.gpu.problem}")
                if skipped is not None:
                    skipped.add(spec.language)
                return
            problem = await engine.probe(spec)
            if problem:
                failures[spec.language] = f"{label}: {problem}"
                say(f"[{spec.language}] smoke test FAILED on {label}: {problem}")
            else:
                say(f"[{spec.language}] smoke test passed on {label}")

        try:
            await backend.remove_leftovers()
            await asyncio.gather(*(probe(spec) for spec in specs))
        finally:
            await backend.close()
    return failures


def _prune_unpacked_roots(settings: Settings) -> None:
    """The oci backend's unpacked roots of image versions just replaced are dead weight."""
    from .engine.backends.rootfs import RootfsStore, roots_in_use

    store = RootfsStore(settings.state_dir / "rootfs")
    if store.root.is_dir():
        removed, kept = store.prune(roots_in_use(settings.run_dir))
        if removed:
            say(f"removed {len(removed)} unpacked root(s) of replaced image versions")
        if kept:
            say(f"kept {len(kept)} unpacked root(s) of replaced image versions that a running "
                f"server still uses (removed by a later `make images`)")


def _specs(languages: list[str] | None, settings: Settings) -> list[RuntimeSpec] | None:
    """The runnable specs of ``languages`` (when none: all but the GPU ones, whose images are
    big and built only when named), or None after saying which is unknown. Ids that cannot run
    here (`unavailable`) are named, with why, and left out."""
    registry = RuntimeRegistry.load(settings.runtimes_dir)
    try:
        specs = [registry.get(lang) for lang in (languages or registry.languages)]
    except LookupError as exc:
        say(str(exc))
        return None
    for spec in specs:
        if not spec.buildable:
            say(f"[{spec.language}] no image: {spec.unavailable}")
    if not languages:
        gpu = [spec.language for spec in specs if spec.gpu]
        if gpu:
            say(f"[{'/'.join(gpu)}] GPU image not built by default (about {GPU_IMAGE_SIZE}): "
                f"make images LANGS=\"{' '.join(gpu)}\"")
        specs = [spec for spec in specs if not spec.gpu]
    return list({spec.language: spec for spec in specs if spec.buildable}.values())


def by_image(specs: Iterable[RuntimeSpec]) -> dict[str, list[RuntimeSpec]]:
    """image -> the specs it serves (several ids may share one image)."""
    groups: dict[str, list[RuntimeSpec]] = {}
    for spec in specs:
        groups.setdefault(spec.image, []).append(spec)
    return groups


def build_images(languages: list[str] | None, settings: Settings, jobs: int = DEFAULT_BUILD_JOBS) -> int:
    specs = _specs(languages, settings)
    if specs is None:
        return 2
    try:
        client = docker.from_env(timeout=600)
        client.ping()
    except docker.errors.DockerException as exc:
        say(f"cannot reach the Docker daemon ({exc}); start dockerd (or Docker Desktop) and retry")
        return 1
    api = client.api
    # An image is built for every id it serves, not only the ones asked for (LANGS=c builds
    # sandbox-cpp:1 and labels it with both gcc's and g++'s versions).
    wanted = {spec.image for spec in specs}
    groups = by_image(spec for spec in RuntimeRegistry.load(settings.runtimes_dir).runnable
                      if spec.image in wanted)
    try:
        ensure_rootfs(api)
        _build(api, BASE_IMAGE, "base", path=str(REPO_ROOT / "images" / "base"),
               buildargs={"ROOTFS": ROOTFS_IMAGE})
        served = sum(map(len, groups.values()))
        say(f"== building {len(groups)} image(s) for {served} language(s), {jobs} at a time")
        versions: dict[str, str] = {}
        # Image builds mostly wait on package downloads and unpacking: a few at once finish
        # sooner than one after another, even on two cores.
        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            futures = [pool.submit(build_image, client, image, group) for image, group in groups.items()]
            try:
                for done, future in enumerate(as_completed(futures), 1):
                    built = future.result()
                    versions.update(built)
                    say(f"== [{done}/{len(groups)}] built {', '.join(built)}")
            except BaseException:
                for future in futures:
                    future.cancel()
                raise
    except BuildFailed as exc:
        say(str(exc))
        return 1
    skipped: set[str] = set()
    failures = asyncio.run(smoke_test(specs, settings, skipped))
    _prune_unpacked_roots(settings)
    say("")
    for spec in specs:
        mark = "FAILED" if spec.language in failures else "ok"
        if spec.language in skipped and spec.language not in failures:
            mark = "skipped on a backend without GPUs"
        say(f"  {spec.language:14} {spec.image:20} {versions[spec.language]:48} smoke: {mark}")
    return 1 if failures else 0


def export_roots(dest: Path, languages: list[str] | None, settings: Settings,
                 metadata_only: bool = False) -> int:
    """Write a pre-unpacked roots folder (``SANDBOX_ROOTFS_DIR``) from the local images."""
    from .engine.backends import ImageMissing
    from .engine.backends.rootfs import RootfsStore

    specs = _specs(languages, settings)
    if specs is None:
        return 2
    store = RootfsStore(settings.state_dir / "rootfs")
    try:
        dest.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        say(f"cannot make {dest}: {exc.strerror}; give a folder that can be written")
        return 1
    for spec in (group[0] for group in by_image(specs).values()):
        try:
            target = store.export_prebuilt(spec.image, dest, with_rootfs=not metadata_only)
        except ImageMissing:
            say(f"[{spec.language}] {spec.image} is not built: run `make images LANGS={spec.language}`")
            return 1
        except docker.errors.DockerException as exc:
            say(f"cannot read {spec.image} from Docker ({exc}); start dockerd and retry")
            return 1
        say(f"[{spec.language}] {spec.image} -> {target}")
    return 0


def list_images(settings: Settings) -> int:
    registry = RuntimeRegistry.load(settings.runtimes_dir)
    try:
        client = docker.from_env()
    except docker.errors.DockerException as exc:
        say(f"cannot reach the Docker daemon ({exc}); start dockerd (or Docker Desktop) and retry")
        return 1
    for spec in registry:
        if not spec.buildable:
            say(f"{spec.language:14} {'-':20} not served: {spec.unavailable}")
            continue
        try:
            labels = client.api.inspect_image(spec.image)["Config"]["Labels"] or {}
            state = image_toolchain(labels, spec.language) or "built (no version label)"
        except docker.errors.ImageNotFound:
            state = "MISSING: run `make images LANGS=" + spec.language + "`"
        say(f"{spec.language:14} {spec.image:20} {state}")
    return 0


if __name__ == "__main__":
    sys.exit(build_images(sys.argv[1:] or None, Settings()))
