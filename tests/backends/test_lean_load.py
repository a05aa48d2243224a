"""The lean start: a folder's tokenizer through `tokenizers` alone and an MLX model built without mlx-lm's package give
exactly what transformers' tokenizer and mlx-lm's loader give (ids, texts, templates, logits, greedy tokens and
records), on the built-in models, a tiny Llama and a tiny Qwen2 whose tokenizer is transformers' Qwen2 class; what
the lean path cannot reproduce falls back to transformers; and a fresh MLX run imports neither transformers nor torch.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from app.core.events import Finished, Request
from app.core.models.sources import BUILTIN_PATH
from app.core.settings import SamplerSettings
from backends.base import LoadOptions
from backends.hf.lean import LeanTokenizer, lean_tokenizer, open_tokenizer
from backends.hf.tokenizer import HFTokenizer, load_tokenizer
from tests.tiny import CORPUS, make_tokenizer

ROOT = Path(__file__).resolve().parents[2]
TEXTS = [*CORPUS[:5], "", " ", "<|endoftext|>hi<|endoftext|>", "<|im_start|>user\nx<|im_end|>", "e\u0301 \t\n\n  x"]
MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": 'Hi <b>&</b> "q"'},
            {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "2+2?"}]
QWEN_TEMPLATE = (  # a template in Qwen2's manner: namespace, loop controls, tojson, raise_exception, bos_token
    "{%- set ns = namespace(system=false) %}{%- for m in messages %}{%- if m['role'] == 'system' %}"
    "{%- set ns.system = true %}{%- endif %}{%- endfor %}{%- if not ns.system %}<|im_start|>system\nDefault."
    "<|im_end|>\n{%- endif %}{%- for m in messages %}{%- if m['role'] not in ['system', 'user', 'assistant'] %}"
    "{{ raise_exception('bad role') }}{%- endif %}{%- if loop.index0 > 9 %}{% break %}{% endif %}"
    "<|im_start|>{{ m['role'] }}\n{{ m['content'] | trim }}<|im_end|>\n{%- endfor %}"
    "{{ {'n': messages | length, 'q': '\"<&>'} | tojson }}{{ bos_token }}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{%- endif %}")


def qwen_folder(path: Path) -> Path:
    """A random Qwen2 (q/k/v biases, tied head) whose tokenizer is transformers' Qwen2Tokenizer class, built from the
    tiny tokenizer's vocabulary and merges and saved as that class saves itself."""
    from safetensors.numpy import save_file
    from transformers import Qwen2Tokenizer

    base = json.loads(make_tokenizer().backend_tokenizer.to_str())["model"]
    tok = Qwen2Tokenizer(vocab=base["vocab"], merges=[tuple(m.split(" ")) if isinstance(m, str) else tuple(m)
                                                      for m in base["merges"]], eos_token="<|endoftext|>")
    tok.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|im_end|>"]})
    tok.chat_template = QWEN_TEMPLATE
    path.mkdir(parents=True)
    tok.save_pretrained(path)
    vocab, hidden, layers = len(tok), 32, 2
    shapes = {"model.embed_tokens.weight": (vocab, hidden), "model.norm.weight": (hidden,)}
    for i in range(layers):
        at, mlp = f"model.layers.{i}.self_attn.", f"model.layers.{i}.mlp."
        for name, out in (("q_proj", hidden), ("k_proj", hidden // 2), ("v_proj", hidden // 2)):
            shapes |= {at + name + ".weight": (out, hidden), at + name + ".bias": (out,)}
        shapes |= {at + "o_proj.weight": (hidden, hidden), mlp + "gate_proj.weight": (64, hidden),
                   mlp + "up_proj.weight": (64, hidden), mlp + "down_proj.weight": (hidden, 64),
                   f"model.layers.{i}.input_layernorm.weight": (hidden,),
                   f"model.layers.{i}.post_attention_layernorm.weight": (hidden,)}
    rng = np.random.default_rng(1)
    save_file({k: (rng.normal(0, 0.2, s) if len(s) == 2 or "bias" in k else np.ones(s)).astype(np.float32)
               for k, s in shapes.items()}, str(path / "model.safetensors"))
    config = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": hidden,
              "intermediate_size": 64, "num_hidden_layers": layers, "num_attention_heads": 4, "num_key_value_heads": 2,
              "vocab_size": vocab, "max_position_embeddings": 512, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
              "tie_word_embeddings": True, "eos_token_id": tok.eos_token_id, "torch_dtype": "float32"}
    (path / "config.json").write_text(json.dumps(config))
    return path


@pytest.fixture(scope="module")
def qwen_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return qwen_folder(tmp_path_factory.mktemp("lean") / "tiny-qwen2")


@pytest.fixture(scope="module", params=["builtin", "thinking", "llama", "qwen2"])
def folder(request: pytest.FixtureRequest, tiny_path: Path, qwen_path: Path) -> Path:
    return {"builtin": BUILTIN_PATH, "thinking": BUILTIN_PATH.parent / "builtin-thinking", "llama": tiny_path,
            "qwen2": qwen_path}[request.param]


def test_the_lean_tokenizer_equals_transformers_one(folder: Path):
    lean, hf = lean_tokenizer(folder, LoadOptions()), load_tokenizer(folder, LoadOptions())
    assert isinstance(lean, LeanTokenizer)
    for text in TEXTS:
        for specials in (True, False):
            assert lean.encode(text, specials) == hf.encode(text, specials), (text, specials)
        ids = hf.encode(text)
        assert lean.decode(ids) == hf.decode(ids)
        stream, theirs = lean.stream(), hf.stream()
        assert [stream.add(i) for i in ids] + [stream.flush()] == [theirs.add(i) for i in ids] + [theirs.flush()]
    assert [lean.token_text(i) for i in range(len(hf.hf))] == [hf.token_text(i) for i in range(len(hf.hf))]
    assert (lean.eos_ids, lean.bos_id, lean.has_chat_template) == (hf.eos_ids, hf.bos_id, hf.has_chat_template)
    if hf.has_chat_template:
        assert lean.apply_chat_template(MESSAGES) == hf.apply_chat_template(MESSAGES)
    assert lean.vocabulary_json() == hf.vocabulary_json()


def test_what_the_lean_path_cannot_reproduce_is_transformers_own(tmp_path: Path, tiny_path: Path):
    for change in ({"tokenizer_class": "LlamaTokenizerFast"}, {"add_prefix_space": True}):
        folder = tmp_path / next(iter(change))
        folder.mkdir()
        for f in tiny_path.iterdir():
            (folder / f.name).write_bytes(f.read_bytes())
        config = json.loads((folder / "tokenizer_config.json").read_text()) | change
        (folder / "tokenizer_config.json").write_text(json.dumps(config))
        assert lean_tokenizer(folder, LoadOptions()) is None
        assert isinstance(open_tokenizer(folder, LoadOptions()), HFTokenizer)


@pytest.mark.parametrize(("template", "message"), [
    ("{{ ''.__class__.__mro__[1].__subclasses__() }}", "this model's chat template tried to access attribute "
     "'__class__' of 'str' object; it was blocked"),
    ("{% set ns = namespace() %}{% set ns._x = 1 %}", "this model's chat template tried to access a namespace "
     "attribute named '_x'; it was blocked"),
    ("{{ raise_exception('Conversation roles must alternate') }}", "this model's chat template failed: "
     "Conversation roles must alternate"),
], ids=["sandbox", "namespace", "raises"])
def test_the_lean_template_runs_in_the_same_sandbox(tiny_path: Path, template: str, message: str):
    lean = lean_tokenizer(tiny_path, LoadOptions())
    assert lean is not None
    lean.chat_template = template
    with pytest.raises(ValueError) as info:
        lean.apply_chat_template(MESSAGES)
    assert str(info.value) == message


@pytest.mark.needs("mlx")
def test_the_lean_mlx_model_is_mlx_lms_own(folder: Path):
    import mlx.core as mx
    from mlx.utils import tree_flatten
    from mlx_lm.utils import load_model

    from backends.mlx.lean import load_lean

    lean, theirs = load_lean(folder), load_model(folder)
    assert lean is not None and type(lean[0]) is type(theirs[0])
    mine, other = dict(tree_flatten(lean[0].parameters())), dict(tree_flatten(theirs[0].parameters()))
    assert mine.keys() == other.keys() and all(mx.array_equal(mine[k], other[k]).item() for k in mine)
    ids = mx.array([[1, 2, 3, 4]])
    assert mx.array_equal(lean[0](ids), theirs[0](ids)).item()


@pytest.mark.needs("mlx")
def test_a_run_on_the_lean_path_equals_one_on_transformers_and_mlx_lms_loader(qwen_path: Path, monkeypatch):
    from backends.mlx import backend

    def run(model: object) -> list:
        req = Request(prompt="def add(a, b):", settings=SamplerSettings(temperature=0.0, max_tokens=12, seed=0),
                      ignore_eos=True)
        from app.core.decoding.generation import generate

        fin = [e for e in generate(model, req, threading.Event()) if isinstance(e, Finished)][-1]  # type: ignore[arg-type]
        return [(s.token_id, s.text, s.sample.top_ids.tobytes(), s.sample.values.tobytes()) for s in fin.trace.steps]

    lean = backend.MlxBackend().load(qwen_path, LoadOptions())
    monkeypatch.setattr(backend, "load_lean", lambda path: None)
    monkeypatch.setattr(backend, "open_tokenizer", load_tokenizer)
    full = backend.MlxBackend().load(qwen_path, LoadOptions())
    assert isinstance(lean.tokenizer, LeanTokenizer) and isinstance(full.tokenizer, HFTokenizer)
    assert run(lean) == run(full)


@pytest.mark.needs("mlx")
def test_an_unusual_folder_loads_through_mlx_lms_loader(tmp_path: Path, tiny_path: Path):
    from backends.mlx.lean import load_lean

    folder = tmp_path / "quantized"
    folder.mkdir()
    for f in tiny_path.iterdir():
        (folder / f.name).write_bytes(f.read_bytes())
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(config | {"quantization": {"group_size": 64, "bits": 4}}))
    assert load_lean(folder) is None
    (folder / "config.json").write_text(json.dumps(config | {"model_type": "gpt2"}))
    assert load_lean(folder) is None


@pytest.mark.needs("mlx")
def test_a_fresh_mlx_run_imports_neither_transformers_nor_torch():
    code = ("import sys\nfrom app.cli.main import main\n"
            "rc = main(['generate', '--prompt', 'def', '--max-tokens', '3', '--backend', 'mlx', '--seed', '0'])\n"
            "print('RC', rc, 'HEAVY', sorted(m for m in ('transformers', 'torch', 'mlx_lm.generate') "
            "if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.stdout.strip().endswith("RC 0 HEAVY []"), out.stdout + out.stderr
