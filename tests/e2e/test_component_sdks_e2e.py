"""The component package (provider/) in other languages: `pulumi package gen-sdk provider --language go` and
`--language nodejs`, through the real CLI and the real language hosts (tests/e2e/build_engine.sh), generate SDKs
that compile against a program using them.

1. gen-sdk (both languages side by side, each in its own copy of the repository) writes an SDK named tpu-fallback
   at the package's version (pyproject.toml), with the components the consumers use;
2. Go: tests/e2e/sdk_consumers/go (main.go: a Platform and a MultiRegionPlatform with typed args, outputs exported
   as typed values) builds with `go build` against the generated SDK and github.com/pulumi/pulumi/sdk/v3 v3.188.0
   from the Go module proxy (go.mod and go.sum pinned there); the whole generated package compiles, so a component
   the consumer does not use breaks it too (Pulumi's Go codegen leaves out the <Name>Args of an object type reached
   only through a plain array property: the failure message says so);
3. TypeScript: tests/e2e/sdk_consumers/nodejs (index.ts, the same program) and every generated file pass
   `tsc --noEmit` (strict) with @pulumi/pulumi, typescript and @types/node as package-lock.json pins them, installed
   with `npm ci` once into the e2e cache (~/.cache/tpu-fallback-e2e/npm-sdk-consumers-<hash of the lock>).

How the CLI runs the package (what was found making this work):

- The Python plugin runs in the virtualenv its PulumiPlugin.yaml names (provider/venv), which the CLI creates and
  fills first (`python -m venv`, pip, setuptools and wheel upgraded from PyPI, then requirements.txt:
  ../requirements.txt and the repository, editable). Each run gets a copy of the repository whose provider/venv is
  a clone of the repository's venv: site-packages hard-linked (pip unlinks a file before it writes one, so the
  original is never written), everything else copied. Not `cp -al` of the whole venv: `python -m venv` over an
  existing venv rewrites pyvenv.cfg and bin/activate* in place, which through a hard link rewrites the repository's
  own venv (its activate scripts then point at the temporary copy). The first test also checks that no file still
  shared with the repository's venv was written during the run.
- Installing the plugin, the CLI asks the Python host which provider plugins the venv's SDKs need (pulumi_gcp and
  pulumi_kubernetes: their pulumi-plugin.json) and downloads each one that is not in $PULUMI_HOME/plugins, from
  get.pulumi.com, even with PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION. Nothing here runs those providers (the
  schema refers to neither), and the CLI takes a plugin as installed when its directory exists
  (workspace.HasPlugin), so the harness creates an empty directory for each.
- The Go SDK comes without a go.mod: gen-sdk (unlike `pulumi package add`) leaves the module to its user, and its
  code imports its own package as example.com/pulumi-tpu-fallback/sdk/go/tpu-fallback (the default import path for
  a schema with no `language.go`) while it writes it to sdk/go/tpufallback. The test gives that directory a go.mod
  naming the import path the code uses (`go 1.20`, as the generator writes for a packable SDK), and the consumer's
  go.mod replaces the import path with the directory.
- The Node.js host here (v3.188.0 built with Go 1.26) writes `./types/input`, `./types/output` and `./utilities`
  where it means `../...` in the generated types/*.ts: pkg/v3 v3.188.0 codegen/nodejs getRelativePath takes
  `path.Dir` of `filepath.Rel(mod, "")`, which was "../." before Go 1.26 and is ".." since, as Rel cleans its
  result (pulumi v3.274.1 has the fix, with a comment saying so). tsc then fails on those imports, and only on
  them. The test corrects exactly those lines (each one it corrects is printed, and none other is touched), then
  type-checks; once the host is fixed there is nothing to correct.

The toolchains: `go` (on PATH or /usr/local/go/bin/go), node 20 or later and npm. Without one its test skips,
saying why; under CI (CI=true) it fails instead. Nothing is downloaded but through the registries: PyPI (pip, in
the plugin's venv), the Go module proxy and npm. Cached: the npm install (per lock file) and the consumer's Go build
cache, both in the e2e cache directory. Measured on 2 cores (2026-12-05): warm 24 s (the two gen-sdk side by side
16 s, mostly the Python host's venv step; go build 0.3 s; tsc 2 s); cold Go build cache and npm install 105 s
(compiling the Pulumi Go SDK and its dependencies 100 s, beside gen-sdk).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import fcntl
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import time
import tomllib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.e2e.engine_cli import COPY_IGNORE, E2E_DIR, REPO_ROOT, Engine, PulumiCli, Run, build_engine, cache_dir

pytestmark = pytest.mark.e2e

UNDER_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}
CONSUMERS = E2E_DIR / "sdk_consumers"
PACKAGE = "tpu-fallback"
LANGUAGES = ("go", "nodejs")
# The components the consumers use: each must be in both SDKs.
COMPONENTS = ("Platform", "MultiRegionPlatform")
# The import path the generated Go code gives its own package; sdk_consumers/go/go.mod replaces it.
GO_IMPORT_PATH = "example.com/pulumi-tpu-fallback/sdk/go/tpu-fallback"
GO_SDK_GO_VERSION = "1.20"
NODE_PACKAGE = "@pulumi/tpu-fallback"
MIN_NODE_MAJOR = 20  # @pulumi/pulumi 3.188.0: engines node >=20
COMMAND_TIMEOUT = 900.0


def say(message: str) -> None:
    print(f"[sdk-e2e] {message}", flush=True)


@contextlib.contextmanager
def step(what: str) -> Iterator[None]:
    started = time.monotonic()
    try:
        yield
    finally:
        say(f"{time.monotonic() - started:6.1f} s  {what}")


# --- toolchains ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Toolchains:
    go: str | None
    node: str | None
    npm: str | None
    missing_go: str  # why go is unusable ("" when it is usable)
    missing_node: str


def find_toolchains() -> Toolchains:
    go = shutil.which("go") or ("/usr/local/go/bin/go" if os.access("/usr/local/go/bin/go", os.X_OK) else None)
    node, npm = shutil.which("node"), shutil.which("npm")
    missing_node = ""
    if node is None or npm is None:
        missing_node = f"no {' and no '.join(n for n, p in (('node', node), ('npm', npm)) if p is None)} on PATH"
    else:
        out = subprocess.run([node, "--version"], capture_output=True, text=True, check=False).stdout.strip()
        found = re.match(r"v(\d+)\.", out)
        if not found or int(found.group(1)) < MIN_NODE_MAJOR:
            missing_node = f"node {out or '(no version)'} is older than v{MIN_NODE_MAJOR} (@pulumi/pulumi needs it)"
    return Toolchains(go, node if not missing_node else None, npm if not missing_node else None,
                      "" if go else "no go on PATH nor at /usr/local/go/bin/go", missing_node)


def require_toolchain(why_missing: str, what: str) -> None:
    """Skip (saying why) when a toolchain is missing; under CI fail instead."""
    if not why_missing:
        return
    message = f"{why_missing}: {what} did not run"
    if UNDER_CI:
        pytest.fail(f"CI=true: {message}")
    pytest.skip(message)


# --- commands -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Command:
    argv: tuple[str, ...]
    cwd: Path
    returncode: int
    output: str
    seconds: float

    def describe(self, tail: int = 12000) -> str:
        out = self.output[-tail:]
        return f"$ {' '.join(self.argv)}   (in {self.cwd}; exit {self.returncode}; {self.seconds:.1f} s)\n{out}"


def run(argv: Sequence[str], cwd: Path, env: Mapping[str, str] | None = None,
        timeout: float = COMMAND_TIMEOUT) -> Command:
    started = time.monotonic()
    try:
        proc = subprocess.run(list(argv), cwd=cwd, env=None if env is None else dict(env), capture_output=True,
                              text=True, timeout=timeout, check=False)
        code, output = proc.returncode, proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as err:
        partial = [s.decode(errors="replace") if isinstance(s, bytes) else s or "" for s in (err.stdout, err.stderr)]
        code, output = -1, "".join(partial) + f"\n[killed after {timeout:g} s]"
    command = Command(tuple(argv), cwd, code, output, time.monotonic() - started)
    say(f"{command.seconds:6.1f} s  exit {code}  {' '.join(Path(a).name if i == 0 else a for i, a in enumerate(argv))}"
        f"  (in {cwd})")
    return command


def expect_ok(command: Command | Run) -> None:
    code = command.returncode
    assert code == 0, command.describe()


# --- the repository copy that gen-sdk runs on ----------------------------------------------------------------


def clone_venv(source: Path, dest: Path) -> None:
    """A venv the CLI may rework without touching `source`: lib/ (site-packages, nearly all of its size) hard-linked,
    since pip unlinks each file it replaces; the rest copied, since `python -m venv` rewrites pyvenv.cfg and
    bin/activate* in place. Symlinks (bin/python*, lib64) stay symlinks."""
    dest.mkdir(parents=True)
    for entry in sorted(source.iterdir()):
        target = dest / entry.name
        if entry.is_symlink():
            os.symlink(os.readlink(entry), target)
        elif entry.is_dir():
            shutil.copytree(entry, target, symlinks=True,
                            copy_function=os.link if entry.name == "lib" else shutil.copy2)
        else:
            shutil.copy2(entry, target)


def written_through_links(venv: Path, since: float) -> list[str]:
    """Files of `venv` still shared with another venv (hard links) and modified after `since`: written in place."""
    found = []
    for root, _dirs, files in os.walk(venv):
        for name in files:
            st = os.lstat(os.path.join(root, name))
            if st.st_nlink > 1 and st.st_mtime > since and not os.path.islink(os.path.join(root, name)):
                found.append(os.path.relpath(os.path.join(root, name), venv))
    return sorted(found)


def stub_sdk_plugins(venv: Path, home: Path) -> list[str]:
    """An empty plugin directory for each provider SDK in `venv` (see the module docstring): the CLI would otherwise
    download them from get.pulumi.com before it runs the package. None of them is run."""
    made = []
    for meta_file in sorted(venv.glob("lib/python3*/site-packages/*/pulumi-plugin.json")):
        meta = json.loads(meta_file.read_text())
        if meta.get("resource") and meta.get("name") and meta.get("version"):
            name = f"resource-{meta['name']}-v{str(meta['version']).removeprefix('v')}"
            (home / "plugins" / name).mkdir(parents=True, exist_ok=True)
            made.append(name)
    return made


def copy_repository(dest: Path) -> Path:
    """The repository without its venv, git or build output, with provider/venv cloned from the repository's venv."""
    shutil.copytree(REPO_ROOT, dest, ignore=shutil.ignore_patterns(*COPY_IGNORE), symlinks=True)
    clone_venv(REPO_ROOT / "venv", dest / "provider" / "venv")
    return dest


# --- the consumers' dependencies ----------------------------------------------------------------------------


def go_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        GOWORK="off",
        GOTOOLCHAIN="local",  # go.mod's `go` line must not make the go command download a toolchain
        CGO_ENABLED="0",
        GOFLAGS="-mod=readonly -buildvcs=false",  # go.mod and go.sum as checked in
        # The compiled Pulumi SDK and its dependencies, in the e2e cache (which CI keeps, keyed by the go.mod files).
        GOCACHE=str(cache_dir() / "go-build-sdk-consumers"),
    )
    return env


PREWARM_GO = """package main

import (
\t_ "github.com/blang/semver"
\t_ "github.com/pulumi/pulumi/sdk/v3/go/pulumi"
)

func main() {}
"""


def prewarm_go(go: str, work: Path) -> Command:
    """While gen-sdk runs: download and compile what the generated SDK imports, in a module with the consumer's
    requirements but without the SDK (which does not exist yet)."""
    module = work / "go-prewarm"
    module.mkdir()
    for name in ("go.mod", "go.sum"):
        shutil.copy2(CONSUMERS / "go" / name, module / name)
    (module / "main.go").write_text(PREWARM_GO)
    env = go_env()
    edit = run([go, "mod", "edit", f"-droprequire={GO_IMPORT_PATH}", f"-dropreplace={GO_IMPORT_PATH}"], module, env)
    if edit.returncode != 0:
        return edit
    return run([go, "build", "-trimpath", "-o", os.devnull, "."], module, env)


NPM_ENV = {"npm_config_update_notifier": "false", "npm_config_fund": "false", "npm_config_audit": "false"}


def node_modules(npm: str, node: str) -> Path:
    """sdk_consumers/nodejs's packages, installed with `npm ci` once per lock file (and node major, platform) into
    the e2e cache: in a temporary directory renamed into place when complete, under a lock."""
    source = CONSUMERS / "nodejs"
    node_major = subprocess.run([node, "--version"], capture_output=True, text=True, check=True).stdout.split(".")[0]
    digest = hashlib.sha256(b"\0".join([(source / "package.json").read_bytes(),
                                        (source / "package-lock.json").read_bytes(),
                                        f"{node_major} {platform.system()} {platform.machine()}".encode()]))
    final = cache_dir() / f"npm-sdk-consumers-{digest.hexdigest()[:16]}"
    done = final / "node_modules" / ".package-lock.json"  # npm writes it last
    if done.is_file():
        say(f"reusing {final}")
        return final / "node_modules"
    cache_dir().mkdir(parents=True, exist_ok=True)
    with (cache_dir() / "npm-sdk-consumers.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if done.is_file():
            return final / "node_modules"
        partial = final.with_name(f"{final.name}.partial-{os.getpid()}")
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir()
        for name in ("package.json", "package-lock.json"):
            shutil.copy2(source / name, partial / name)
        installed = run([npm, "ci", "--ignore-scripts", "--no-audit", "--no-fund"], partial,
                        {**os.environ, **NPM_ENV})
        if installed.returncode != 0:
            shutil.rmtree(partial, ignore_errors=True)
            raise AssertionError(installed.describe())
        shutil.rmtree(final, ignore_errors=True)
        partial.rename(final)
    return final / "node_modules"


# --- the Node.js host's relative imports (see the module docstring) ------------------------------------------

_RELATIVE_IMPORT = re.compile(r'^(import (?:type )?\* as \w+ from ")(\.{1,2}/[^"]+)(";)\s*$', re.MULTILINE)


def _resolves(base: Path, spec: str) -> bool:
    target = Path(os.path.normpath(base / spec))
    return any(p.is_file() for p in (target.with_name(target.name + ".ts"), target / "index.ts", target))


def correct_nested_imports(sdk: Path) -> list[str]:
    """Rewrite `./x` to `../x` in the generated files below the SDK's root where `./x` resolves to nothing and
    `../x` does. Returns each correction as `file:line: old -> new`."""
    corrections = []
    for path in sorted(sdk.rglob("*.ts")):
        if path.parent == sdk or "node_modules" in path.parts:
            continue
        text = path.read_text()

        def fix(found: re.Match[str], path: Path = path, text: str = text) -> str:
            spec = found.group(2)
            if _resolves(path.parent, spec) or not _resolves(path.parent.parent, spec):
                return found.group(0)
            new = "../" + spec.removeprefix("./")
            line = text.count("\n", 0, found.start()) + 1
            corrections.append(f"{path.relative_to(sdk)}:{line}: {spec} -> {new}")
            return f"{found.group(1)}{new}{found.group(3)}"

        new_text = _RELATIVE_IMPORT.sub(fix, text)
        if new_text != text:
            path.write_text(new_text)
    return corrections


# --- the module's work ----------------------------------------------------------------------------------------


@dataclass
class Work:
    root: Path
    engine: Engine
    toolchains: Toolchains
    gen: dict[str, Run]  # language -> its gen-sdk run
    shared_writes: dict[str, list[str]]  # language -> files written through hard links into the repository's venv
    go_prewarm: concurrent.futures.Future[Command] | None
    npm: concurrent.futures.Future[Path] | None

    @property
    def sdk(self) -> Path:
        return self.root / "sdk"


def generate(cli: PulumiCli, work: Path, language: str) -> tuple[Run, list[str]]:
    copy = copy_repository(work / f"repo-{language}")
    started = time.time()
    gen = cli.run("package", "gen-sdk", str(copy / "provider"), "--language", language, "--out", str(work / "sdk"),
                  cwd=work, check=False, timeout=COMMAND_TIMEOUT)
    return gen, written_through_links(copy / "provider" / "venv", started)


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Work]:
    if not (REPO_ROOT / "venv" / "bin" / "python").exists():
        pytest.fail(f"{REPO_ROOT / 'venv'} does not exist: run ./scripts/setup")
    with step("build_engine.sh (cached: a no-op)"):
        engine = build_engine()
    for host in ("pulumi-language-python", *(f"pulumi-language-{lang}" for lang in LANGUAGES)):
        assert (engine.bin_dir / host).is_file(), f"{engine.bin_dir} has no {host}: run tests/e2e/build_engine.sh"
    root = tmp_path_factory.mktemp("component-sdks")
    toolchains = find_toolchains()
    cli = PulumiCli(engine, root)
    stubs = stub_sdk_plugins(REPO_ROOT / "venv", cli.home)
    say(f"empty plugin directories for the venv's provider SDKs: {', '.join(stubs) or '(none)'}")
    shutil.copytree(CONSUMERS, root / "sdk_consumers")
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        go_prewarm = pool.submit(prewarm_go, toolchains.go, root) if toolchains.go else None
        npm = pool.submit(node_modules, toolchains.npm, toolchains.node) if toolchains.npm and toolchains.node else None
        with step("gen-sdk go and nodejs side by side, each in its own copy of the repository"):
            runs = {lang: pool.submit(generate, cli, root, lang) for lang in LANGUAGES}
            results = {lang: future.result() for lang, future in runs.items()}
        yield Work(root, engine, toolchains, {k: v[0] for k, v in results.items()},
                   {k: v[1] for k, v in results.items()}, go_prewarm, npm)
    say("\n" + cli.summary())


@pytest.fixture(autouse=True)
def _timed(request: pytest.FixtureRequest) -> Iterator[None]:
    started = time.monotonic()
    yield
    say(f"{request.node.name}: {time.monotonic() - started:.1f} s wall")


# --- 1. gen-sdk -------------------------------------------------------------------------------------------------


def test_gen_sdk_writes_a_go_and_a_nodejs_sdk_of_the_package(work: Work) -> None:
    for language in LANGUAGES:
        expect_ok(work.gen[language])
        gen = work.gen[language]
        assert f"SDK has been written to {work.sdk / language}" in gen.text, gen.describe()
        assert not work.shared_writes[language], (
            f"gen-sdk --language {language} wrote these files of {REPO_ROOT / 'venv'} (through hard links):\n"
            + "\n".join(work.shared_writes[language]))
    # The version the plugin reports: the package's, as pip installed it from the copy (provider/__main__.py).
    want = tomllib.loads((work.root / "repo-go" / "pyproject.toml").read_text())["project"]["version"]

    go_dirs = [p for p in (work.sdk / "go").iterdir() if p.is_dir()]
    assert [p.name for p in go_dirs] == ["tpufallback"], go_dirs
    plugin = json.loads((go_dirs[0] / "pulumi-plugin.json").read_text())
    assert plugin == {"resource": True, "name": PACKAGE, "version": want}, plugin
    package_json = json.loads((work.sdk / "nodejs" / "package.json").read_text())
    assert (package_json["name"], package_json["version"]) == (NODE_PACKAGE, want), package_json
    assert package_json["pulumi"] == {"resource": True, "name": PACKAGE, "version": want}, package_json

    for component in COMPONENTS:
        stem = component[0].lower() + component[1:]
        go_source = (go_dirs[0] / f"{stem}.go").read_text()
        assert f'RegisterRemoteComponentResource("{PACKAGE}:index:{component}"' in go_source, component
        ts_source = (work.sdk / "nodejs" / f"{stem}.ts").read_text()
        assert f"__pulumiType = '{PACKAGE}:index:{component}'" in ts_source, component
    say("Go SDK: " + ", ".join(sorted(p.name for p in go_dirs[0].glob("*.go"))))
    say("Node.js SDK: " + ", ".join(sorted(str(p.relative_to(work.sdk / "nodejs"))
                                           for p in (work.sdk / "nodejs").rglob("*.ts"))))


# --- 2. Go --------------------------------------------------------------------------------------------------------


def test_the_go_sdk_compiles_into_a_program_that_uses_it(work: Work) -> None:
    require_toolchain(work.toolchains.missing_go, "the Go SDK's compile")
    assert work.toolchains.go and work.go_prewarm
    expect_ok(work.gen["go"])
    with step("the Pulumi Go SDK's modules downloaded and compiled (beside gen-sdk)"):
        expect_ok(work.go_prewarm.result())
    package_dir = work.sdk / "go" / "tpufallback"
    imports = set(re.findall(r'"(\S+)/internal"', "\n".join(p.read_text() for p in package_dir.glob("*.go"))))
    assert imports == {GO_IMPORT_PATH}, (
        f"the generated code imports its package as {imports}; sdk_consumers/go/go.mod replaces {GO_IMPORT_PATH}")
    (package_dir / "go.mod").write_text(f"module {GO_IMPORT_PATH}\n\ngo {GO_SDK_GO_VERSION}\n")
    consumer = work.root / "sdk_consumers" / "go"
    with step("go build of sdk_consumers/go against the generated SDK"):
        built = run([work.toolchains.go, "build", "-trimpath", "-o", str(work.root / "bin") + os.sep, "./..."],
                    consumer, go_env())
    missing_args = sorted(set(re.findall(r"undefined: (\w+Args)\b", built.output)))
    assert built.returncode == 0, built.describe() + (
        f"\n{', '.join(missing_args)}: the generated args refer to input types the generator did not write. Pulumi's "
        "Go codegen (pkg/v3 codegen/go populateDetailsForPropertyTypes, v3.188.0 to v3.274.1 at least) writes an "
        "object type's <Name>Args only when it reaches the type as an input: a plain object property marks it so, "
        "a plain *array* of objects does not (only if a plain object property sorts before it in the same "
        "resource). A component whose args hold a list of objects and no object before it (a TypedDict field "
        "`list[X]`, not a pulumi.Input) gets an SDK that does not compile; with the property not plain (the field "
        "a pulumi.Input) the generator writes the type (checked on TrainingJobs' schema, 2026-12-05)."
        if missing_args else "")
    assert (work.root / "bin" / "sdk-consumer-go").is_file(), built.describe()


# --- 3. TypeScript ------------------------------------------------------------------------------------------------


def test_the_nodejs_sdk_type_checks_with_a_program_that_uses_it(work: Work) -> None:
    require_toolchain(work.toolchains.missing_node, "the Node.js SDK's type check")
    assert work.toolchains.node and work.npm
    expect_ok(work.gen["nodejs"])
    with step("npm ci of sdk_consumers/nodejs (once per lock file; beside gen-sdk)"):
        modules = work.npm.result()
    (work.root / "node_modules").symlink_to(modules, target_is_directory=True)
    corrections = correct_nested_imports(work.sdk / "nodejs")
    for line in corrections:
        say(f"corrected (the Node.js host's Go 1.26 relative-import bug, see the module docstring): {line}")
    tsc = modules / "typescript" / "bin" / "tsc"
    with step("tsc --noEmit: index.ts and the generated SDK"):
        checked = run([work.toolchains.node, str(tsc), "--noEmit", "--pretty", "false", "--listFiles", "-p", "."],
                      work.root / "sdk_consumers" / "nodejs", {**os.environ, **NPM_ENV})
    expect_ok(checked)
    # --listFiles: every file it checked, one absolute path a line; the generated ones must all be among them.
    checked_files = {Path(line).resolve() for line in checked.output.splitlines()
                     if line.startswith("/") and "/node_modules/" not in line}
    generated = {p.resolve() for p in (work.sdk / "nodejs").rglob("*.ts")}
    assert generated | {(work.root / "sdk_consumers" / "nodejs" / "index.ts").resolve()} == checked_files, (
        sorted(map(str, generated ^ checked_files)))
