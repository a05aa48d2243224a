"""A model folder with nonsense in its config.json or safetensors header is refused before any framework reads
it, on both backends and in the window, with one line that names the file, the field and the value."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from backends.base import LoadOptions, ModelLoadError
from backends.checks import ConfigShape, check_config

Edit = Callable[[dict], object]


def setting(**values: object) -> Edit:
    """A config with these values (None: the field removed)."""
    def edit(cfg: dict) -> dict:
        for k, v in values.items():
            cfg.pop(k) if v is None else cfg.__setitem__(k, v)
        return cfg
    return edit


CONFIG_CASES = {  # case: (edit of the tiny model's config, what the message must say after "<folder>/config.json")
    "zero layers": (setting(num_hidden_layers=0), r": num_hidden_layers is 0; the number of layers must be"),
    "negative layers": (setting(num_hidden_layers=-3), r": num_hidden_layers is -3;"),
    "layers as text": (setting(num_hidden_layers="2"), r': num_hidden_layers is "2"; .* a whole number'),
    "fractional layers": (setting(num_hidden_layers=2.5), r": num_hidden_layers is 2.5;"),
    "layers as a boolean": (setting(num_hidden_layers=True), r": num_hidden_layers is true;"),
    "zero context": (setting(max_position_embeddings=0), r": max_position_embeddings is 0; the context length"),
    "negative context": (setting(max_position_embeddings=-1), r": max_position_embeddings is -1;"),
    "zero vocabulary": (setting(vocab_size=0), r": vocab_size is 0; the vocabulary size must be"),
    "zero heads": (setting(num_attention_heads=0), r": num_attention_heads is 0;"),
    "no layers": (setting(num_hidden_layers=None), r" has no num_hidden_layers \(the number of layers\)"),
    "no vocabulary": (setting(vocab_size=None), r" has no vocab_size"),
    "no hidden size": (setting(hidden_size=None), r" has no hidden_size"),
    "hidden size not divisible by heads": (setting(hidden_size=66, head_dim=None),
                                           r": hidden size 66 is not divisible by its 4 attention heads"),
    # a head size given: transformers' own Llama validation refuses it, and the line still blames config.json
    "hidden size not divisible, head size given": (setting(hidden_size=65), r": The hidden size \(65\) is not a "
                                                   r"multiple of the number of attention heads \(4\)"),
    "heads not a multiple of KV heads": (setting(num_key_value_heads=3), r": 4 attention heads cannot be shared "
                                         r"by 3 key-value heads"),
    "a JSON array": (lambda cfg: [cfg], r" holds a JSON array, not an object"),
    "a JSON string": (lambda cfg: "llama", r" holds a JSON string, not an object"),
    "text_config an array": (setting(text_config=[1]), r": text_config is a JSON array, not an object"),
    "nested zero layers": (setting(text_config={"num_hidden_layers": 0}), r": text_config\.num_hidden_layers is 0;"),
    # a field of the wrong type is named, before any dimension is looked at
    "model type a number": (lambda cfg: {"model_type": 5}, r": model_type is 5; it must be text, the architecture's"),
    "model type a list": (setting(model_type=["llama"]), r': model_type is \["llama"\]; it must be text'),
    "nested model type": (setting(text_config={"model_type": 5}), r": text_config\.model_type is 5; it must be text"),
    "architectures as text": (setting(architectures="LlamaForCausalLM"), r': architectures is "LlamaForCausalLM"; '
                              r"it must be a list of class names"),
    "quantization a number": (setting(quantization=5), r": quantization is 5; it must be an object"),
    "quantization config a list": (setting(quantization_config=[1]), r": quantization_config is \[1\]; it must be"),
    "eos as text": (setting(eos_token_id="x"), r': eos_token_id is "x"; it must be a token id or a list of them'),
    "tied embeddings as text": (setting(tie_word_embeddings="yes"), r': tie_word_embeddings is "yes"; it must be '
                                r"true or false"),
    "epsilon as text": (setting(rms_norm_eps="1e-5"), r': rms_norm_eps is "1e-5"; it must be a number'),
    "rope scaling a number": (setting(rope_scaling=5), r": rope_scaling is 5; it must be an object"),
    "layers nested deep": (setting(num_hidden_layers=json.loads("[" * 500 + "]" * 500)),
                           r": num_hidden_layers is \[\[\[\[.*…; the number of layers"),
}


def header_edit(header: bytes) -> Callable[[bytes], bytes]:
    """A safetensors file whose header is replaced by `header` (well-formed JSON of the wrong shape)."""
    return lambda data: len(header).to_bytes(8, "little") + header + data[8 + int.from_bytes(data[:8], "little"):]


HEADER_CASES = {
    "an array": (header_edit(b"[1, 2]"), r"model\.safetensors has a damaged header \(a JSON array where the object "
                 r"that lists its tensors should be\)"),
    "an entry that is a number": (header_edit(b'{"w": 5}'), r"model\.safetensors has a damaged header \(its entry "
                                  r"'w' is a JSON number, not an object\)"),
}


def folder_with(tiny_path: Path, tmp_path: Path, config: Edit | None = None,
                weights: Callable[[bytes], bytes] | None = None) -> Path:
    path = tmp_path / "model"
    shutil.copytree(tiny_path, path)
    if config is not None:
        cfg = json.loads((path / "config.json").read_text())
        (path / "config.json").write_text(json.dumps(config(cfg)))
    if weights is not None:
        f = path / "model.safetensors"
        f.write_bytes(weights(f.read_bytes()))
    return path


def refusal(backend: str, path: Path) -> str:
    from backends import get_backend

    with pytest.raises(ModelLoadError) as info:
        get_backend(backend).load(path, LoadOptions())
    return str(info.value)


@pytest.mark.parametrize("backend", ["torch", "mlx"])
@pytest.mark.parametrize("case", CONFIG_CASES)
def test_a_nonsense_config_value_is_named_with_its_file(tiny_path: Path, tmp_path: Path, backend: str, case: str):
    edit, says = CONFIG_CASES[case]
    path = folder_with(tiny_path, tmp_path, config=edit)
    message = refusal(backend, path)
    assert message.startswith(str(path / "config.json")), message  # the blame on the right file
    assert re.search(says, message), message
    assert "\n" not in message and "Traceback" not in message


@pytest.mark.parametrize("backend", ["torch", "mlx"])
@pytest.mark.parametrize("case", HEADER_CASES)
def test_a_safetensors_header_that_is_not_an_object_is_named(tiny_path: Path, tmp_path: Path, backend: str,
                                                             case: str):
    edit, says = HEADER_CASES[case]
    message = refusal(backend, folder_with(tiny_path, tmp_path, weights=edit))
    assert re.fullmatch(says, message), message


@pytest.mark.parametrize("backend", ["torch", "mlx"])
def test_a_config_nested_too_deeply_is_refused_in_one_line(tiny_path: Path, tmp_path: Path, backend: str):
    path = folder_with(tiny_path, tmp_path)
    (path / "config.json").write_text("[" * 100_000 + "]" * 100_000)
    assert refusal(backend, path) == f"{path / 'config.json'} is not valid JSON (nested too deeply to be read)"


LLAMA = {"model_type": "llama", "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
         "hidden_size": 64, "vocab_size": 384, "max_position_embeddings": 4096}


@pytest.mark.parametrize("config", [
    LLAMA,
    {**LLAMA, "head_dim": None, "num_key_value_heads": None},  # null: the framework's default
    {**LLAMA, "hidden_size": 4096, "num_attention_heads": 96, "head_dim": 128},  # GLM-4.5-style: head size given
    {**LLAMA, "max_position_embeddings": None},  # state-space models have no context length
    {"model_type": "gpt2", "n_layer": 2, "n_head": 4, "n_embd": 64, "vocab_size": 384, "n_positions": 1024},
    {"model_type": "llava", "text_config": {"model_type": "llama", "vocab_size": 32064}},  # the rest: defaults
    {"model_type": "custom", "auto_map": {"AutoConfig": "c.C"}, "depth": 2, "width": 64},  # remote code's names
], ids=["llama", "nulls", "head-size-given", "no-context", "gpt2-names", "multimodal", "remote-code"])
def test_real_configs_pass_and_their_shape_is_read(config: dict):
    check_config(config, Path("config.json"))
    if config.get("model_type") == "gpt2":
        assert ConfigShape.from_config(config) == ConfigShape(layers=2, heads=4, kv_heads=4, head_dim=16, hidden=64,
                                                              vocab=384, context=1024)


def test_the_window_shows_the_same_line_in_its_banner(qtbot, tiny_path: Path, tmp_path: Path):
    from PySide6.QtCore import QSettings

    from app.core.models.sources import ModelSpec
    from app.ui.main_window import MainWindow

    path = folder_with(tiny_path, tmp_path, config=setting(num_hidden_layers=-1))
    w = MainWindow(settings=QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat),
                   spec=ModelSpec(str(path), "torch"))
    qtbot.addWidget(w)
    w.show()
    qtbot.waitUntil(w.banner.isVisible, timeout=60_000)
    assert w.banner.label.text() == f"{path / 'config.json'}: num_hidden_layers is -1; the number of layers must " \
                                    "be a whole number of at least 1"
    assert w.playground.info is None
    w.close()


def test_the_opt_in_refusals_say_how_to_allow_them(tiny_path: Path, tmp_path: Path):
    from backends.base import PickleRefusedError, RemoteCodeRefusedError
    from backends.checks import check_folder
    from tests.tiny import make_remote_code_model

    remote = make_remote_code_model(tiny_path, tmp_path / "remote")
    with pytest.raises(RemoteCodeRefusedError) as info:
        check_folder(remote, LoadOptions())
    assert "--trust-remote-code on the command line" in str(info.value)
    assert "“Allow its code for …” in the window" in str(info.value)  # the banner's button (main_window.py)
    pickled = folder_with(tiny_path, tmp_path)
    (pickled / "model.safetensors").rename(pickled / "pytorch_model.bin")
    with pytest.raises(PickleRefusedError) as info:
        check_folder(pickled, LoadOptions())
    assert "--allow-pickle on the command line" in str(info.value)
    assert "“Allow pickle weights for …” in the window" in str(info.value)
    check_folder(remote, LoadOptions(trust_remote_code=True))
