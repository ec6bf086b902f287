"""The README and docs/ name only things that exist: every repository path, `python -m` module, script, make target,
training config, preset, interpreter and link they mention, and every training command of the README composes with
its overrides as hydra would compose it. A page that still names a moved module fails here, not in a user's terminal."""

from __future__ import annotations

import importlib.util
import re
import shlex
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = sorted((REPO / "docs").glob("*.md"))
PAGES = [REPO / "README.md", REPO / "BENCHMARKS.md", *DOCS]
TOP_FOLDERS = ("envs", "training", "utils", "evaluation", "configs", "tests", "bench", "docs", "gpu_kit", ".ci")
PATH = re.compile(rf"(?<![\w./~-])((?:{'|'.join(re.escape(f) for f in TOP_FOLDERS)})/[\w./*<>-]*)")
MODULE = re.compile(r"python3? -m ([\w.]+)")
SCRIPT = re.compile(r"python3? ((?:[\w-]+/)+[\w-]+\.py)")
MAKE = re.compile(r"\bmake ((?:[\w-]+(?:=\S+)? ?)+)")
CONFIG_NAME = re.compile(r"--config-name[ =](\w+)")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
# model=X: configs/model/X.yaml, hardware=X: configs/hardware/X.yaml
PRESET = re.compile(r"(?<![\w.])(model|hardware)=([\w.-]*\w)(?![\w{.-])")
MIX_NAME = re.compile(r"env\.mix=([\w-]+)(?![\w./-])")  # a name (a path is checked as a path)
INTERPRETER = re.compile(r"(?<![\w/])(\.venv[\w-]*)/bin/python")
PLACEHOLDER = re.compile(r"\$|<|=[A-Z_]+$|^[A-Z_]+$")  # RUN, PRESET, <step>, $PWD: filled in by the reader
PIP_MODULES = {"pip", "pytest", "venv", "vllm.entrypoints.openai.api_server"}
# files a page names before they exist, and why
NOT_YET = {"gpu_kit/image-freeze.txt": "written by the kit's first GPU lease (stage a_machine), then committed"}


def ignored_by_git(token: str) -> bool:
    """Outputs (gpu_kit/dist/, checkpoints under an ignored folder): named by the docs, made by the commands."""
    paths = [token, token.rstrip("/") + "/"]  # a folder pattern (/gpu_kit/results/) matches only with the slash
    return any(subprocess.run(["git", "check-ignore", "-q", "--no-index", path], cwd=REPO).returncode == 0
               for path in paths)


def code_spans(text: str) -> list[str]:
    """Returns the text of every fenced block and inline `code` span: where commands and paths are written."""
    blocks = re.findall(r"```[^\n]*\n(.*?)```", text, flags=re.S)
    inline = re.findall(r"`([^`\n]+)`", re.sub(r"```.*?```", "", text, flags=re.S))
    return blocks + inline


def make_targets() -> set[str]:
    text = (REPO / "Makefile").read_text()
    return set(re.findall(r"^([\w-]+):", text, flags=re.M))


def makefile_venvs() -> set[str]:
    """The virtual environments the Makefile installs (.venv, .venv-gpu, .venv-vllm)."""
    return set(re.findall(r"(?<![\w/])(\.venv[\w-]*)", (REPO / "Makefile").read_text()))


def runnable_module(module: str) -> bool:
    """Whether `python -m module` runs: ours by its file (a package needs __main__.py), others by import lookup."""
    path = REPO / module.replace(".", "/")
    if module.split(".")[0] in TOP_FOLDERS:
        return path.with_suffix(".py").is_file() or (path / "__main__.py").is_file()
    return importlib.util.find_spec(module) is not None


def path_problem(token: str) -> str | None:
    """Returns why a repository path named in a page does not exist, or None."""
    token = re.split(r"::|:(?=[A-Za-z_])", token)[0].rstrip(".,;)")
    parts = token.split("/")
    if "." not in parts[-1] and not token.endswith("/") and len(parts) == 2:
        return None  # a metric key such as training/rollout_probs_diff_mean, not a path
    placeholder = next((i for i, part in enumerate(parts)
                        if "<" in part or re.fullmatch(r"[A-Z_]+", part.split(".")[0])), None)
    if placeholder is not None:  # configs/mix/NAME.yaml, generations/<step>.jsonl: check the folder it lives in
        token = "/".join(parts[:placeholder])
    if "*" in token:
        return None if list(REPO.glob(token)) else f"{token}: matches no file"
    if (REPO / token).exists() or token in NOT_YET or ignored_by_git(token):
        return None
    return f"{token}: no such file or folder"


def page_problems(text: str, page: Path) -> list[str]:
    """Returns every command, path and link of `text` (the page `page`) that names nothing in this repository."""
    problems = []
    targets = make_targets()
    for span in code_spans(text):
        for token in PATH.findall(span):
            problem = path_problem(token)
            if problem:
                problems.append(problem)
        for module in MODULE.findall(span):
            if module not in PIP_MODULES and not runnable_module(module):
                problems.append(f"python -m {module}: no such module")
        for script in SCRIPT.findall(span):
            if not (REPO / script).is_file():
                problems.append(f"python {script}: no such script")
        for words in MAKE.findall(span):
            for word in words.split():
                if "=" not in word and word not in targets:
                    problems.append(f"make {word}: no such target in the Makefile")
        for group, name in PRESET.findall(span):
            if not re.fullmatch(r"[A-Z_]+", name) and not (REPO / "configs" / group / f"{name}.yaml").is_file():
                problems.append(f"{group}={name}: no configs/{group}/{name}.yaml")
        for name in MIX_NAME.findall(span):
            if not re.fullmatch(r"[A-Z_]+", name) and not (REPO / "configs" / "mix" / f"{name}.yaml").is_file():
                problems.append(f"env.mix={name}: no configs/mix/{name}.yaml")
        for venv in INTERPRETER.findall(span):
            if venv not in makefile_venvs():
                problems.append(f"{venv}/bin/python: no environment of that name in the Makefile")
        for line in span.splitlines():
            if "--config-path" not in line:
                problems += [f"--config-name {name}: no configs/{name}.yaml"
                             for name in CONFIG_NAME.findall(line) if not (REPO / "configs" / f"{name}.yaml").is_file()]
    for link in LINK.findall(text):
        if not re.match(r"[a-z]+://|#|mailto:", link) and not (page.parent / link.split("#")[0]).exists():
            problems.append(f"link {link}: no such file")
    return problems


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_command_and_path_a_page_names_exists(page):
    assert page_problems(page.read_text(), page) == []


def test_the_check_finds_what_does_not_exist():
    text = ("Run `python -m training.no_such_module` or `python training/gone.py --config-name no_such_config`, "
            "read `training/launch/no_such.py` and `configs/mix/*.nothing`, then `make no-such-target`; "
            "see [the page](docs/no_such_page.md).\n")
    problems = page_problems(text, REPO / "README.md")
    assert sorted(problems) == sorted([
        "training/launch/no_such.py: no such file or folder",
        "training/gone.py: no such file or folder",
        "configs/mix/*.nothing: matches no file",
        "python -m training.no_such_module: no such module",
        "python training/gone.py: no such script",
        "make no-such-target: no such target in the Makefile",
        "--config-name no_such_config: no configs/no_such_config.yaml",
        "link docs/no_such_page.md: no such file",
    ])


def test_the_readme_links_every_docs_page():
    readme = (REPO / "README.md").read_text()
    assert [p.name for p in DOCS if f"docs/{p.name}" not in readme and p.name != "README.md"] == []


def training_commands(text: str) -> list[list[str]]:
    """Every `train_grpo.py` and `-m training.pipeline` command line of a page's code, split as a shell splits it."""
    found = []
    for span in code_spans(text):
        for line in re.sub(r"\\\n\s*", " ", span).splitlines():  # a command continued with a backslash is one line
            if ("training/train_grpo.py" in line or "-m training.pipeline" in line) and "--config-name" in line:
                found.append(shlex.split(line, comments=True))
    return found


def command_problems(argv: list[str]) -> list[str]:
    """Composes a training command's config with its hydra overrides (placeholders left out); returns what fails."""
    from training.launch.config import compose_config
    from training.report.pipeline import parse_args

    if "training.pipeline" in argv:
        rest = argv[argv.index("training.pipeline") + 1:]
        try:
            args, overrides = parse_args([w for w in rest if not PLACEHOLDER.search(w)] + ["--run-dir", "RUN"])
        except SystemExit:
            return [f"{shlex.join(argv)}: python -m training.pipeline refuses its arguments"]
        name = args.config_name
    else:
        rest = argv[argv.index("training/train_grpo.py") + 1:]
        name = rest[rest.index("--config-name") + 1] if "--config-name" in rest else "quickstart"
        overrides = [w for w in rest if "=" in w and not w.startswith("-")]
    overrides = [o for o in overrides if not PLACEHOLDER.search(o) and not o.startswith("hydra.")]
    try:
        compose_config(name, overrides)
    except Exception as err:  # noqa: BLE001 - every command's failure is reported
        return [f"{shlex.join(argv)}: {type(err).__name__}: {str(err).splitlines()[0]}"]
    return []


def test_every_training_command_in_the_readme_composes():
    commands = training_commands((REPO / "README.md").read_text())
    assert len(commands) >= 3
    assert [problem for argv in commands for problem in command_problems(argv)] == []


def test_the_command_check_finds_what_does_not_compose():
    text = ("```bash\n.venv-gpu/bin/python training/train_grpo.py --config-name grpo model=qwen9 env.mix=logic\n"
            "python training/train_grpo.py --config-name grpo no_such.key=1  # a comment\n"
            "python -m training.pipeline --config-name grpo --run-dir runs/x env.mix=PATH model=qwen2.5-1.5b\n```\n"
            "Use `.venv-nothing/bin/python`, `hardware=3gpu` and `env.mix=nothing`.\n")
    problems = [p for argv in training_commands(text) for p in command_problems(argv)]
    assert len(problems) == 2 and "model=qwen9" in problems[0] and "no_such.key" in problems[1]
    assert sorted(page_problems(text, REPO / "README.md")) == sorted([
        "model=qwen9: no configs/model/qwen9.yaml", "hardware=3gpu: no configs/hardware/3gpu.yaml",
        "env.mix=nothing: no configs/mix/nothing.yaml",
        ".venv-nothing/bin/python: no environment of that name in the Makefile"])
