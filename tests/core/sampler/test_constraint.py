"""Constrained decoding on real tiny models (both backends) and llguidance itself: every output parses and validates
against its schema or fully matches its regex, across seeds, `--n` rows and both places; the recorded legal count is
the engine's own mask count; a fork and a replay keep the matcher in step; a constraint that allows every token
changes nothing, bit for bit; bad input is one line naming the position; a trace reopens with its constraint."""

from __future__ import annotations

import json
import re
import threading

import jsonschema
import llguidance as llg
import numpy as np
import pytest

from app.core.decoding.generation import generate
from app.core.events import Finished, Request, Step, Stuck
from app.core.record.record import Sample
from app.core.record.trace import RunTrace
from app.core.sampler import constraint as constraint_module
from app.core.sampler.constraint import ConstraintError, Matcher, check, compile_for, matcher_for
from app.core.sampler.grammar_step import stuck
from app.core.sampler.pipeline import History
from app.core.sampler.sampling import sample
from app.core.sampler.step_view import make_preview
from app.core.settings import SamplerSettings
from app.core.stage_inputs import Constraint
from backends.ops import NUMPY

SCHEMA = {"type": "object", "additionalProperties": False, "required": ["name", "age", "pet"],
          "properties": {"name": {"type": "string", "maxLength": 6},
                         "age": {"type": "integer", "minimum": 0, "maximum": 120},
                         "pet": {"enum": ["cat", "dog", "none"]}}}
CODE = r"[0-9]{3}-[a-z]{2,4}"


def run(model, constraint: Constraint, seed: int, n: int = 1, max_tokens: int = 120, **request) -> list[Finished]:
    settings = SamplerSettings(temperature=1.0, top_k=40, seed=seed, max_tokens=max_tokens, constraint=constraint)
    events = list(generate(model, Request(prompt="Hello", settings=settings, n=n, **request), threading.Event()))
    return [e for e in events if isinstance(e, Finished)]


def engine_masks(model, c: Constraint, tokens: list[int]) -> list[np.ndarray]:
    """The engine's own mask before each of `tokens`, from a fresh matcher of llguidance's, fed one token at a time."""
    compiled = compile_for(c, model.tokenizer, model.info.vocab_size)
    m = compiled.template.deep_copy()
    masks = []
    for t in tokens:
        bits = np.unpackbits(np.frombuffer(m.compute_bitmask(), np.uint8), bitorder="little")[: compiled.vocab]
        masks.append(bits)
        if t not in compiled.eos:
            assert m.consume_token(t)
    return masks


@pytest.mark.parametrize("place", ["first", "on_reject"])
def test_every_output_validates_against_its_schema(model, place):
    c = Constraint("json_schema", json.dumps(SCHEMA), place)
    for seed in (0, 5):
        for f in run(model, c, seed, n=3):
            assert f.reason == "eos", (f.reason, f.message, f.trace.text)
            jsonschema.validate(json.loads(f.trace.text), SCHEMA)


def test_every_output_fully_matches_its_regex_and_the_legal_count_is_the_engines(model):
    c = Constraint("regex", CODE)
    for seed in range(3):
        for f in run(model, c, seed, n=3):
            assert re.fullmatch(CODE, f.trace.text), f.trace.text
            tokens = f.trace.token_ids
            for st, mask in zip(f.trace.steps, engine_masks(model, c, tokens), strict=True):
                g = st.sample.grammar
                assert g.legal == int(mask.sum()) and mask[st.token_id] == 1
                assert st.sample.stage_names[0] == "grammar"
                assert st.sample.kept_counts[0] <= g.legal  # (the stage left the legal tokens with a finite logit)
                np.testing.assert_array_equal(g.legal_top, mask[st.sample.top_ids] == 1)
                assert g.forced == (g.legal == 1)
                assert g.margin >= 0 and (g.margin == 0) == g.favourite_kept


def test_on_reject_draws_the_chain_first_and_redraws_only_what_the_grammar_refuses(torch_model):
    c = Constraint("regex", CODE, "on_reject")
    f = run(torch_model, c, 0)[0]
    assert re.fullmatch(CODE, f.trace.text)
    masks = engine_masks(torch_model, c, f.trace.token_ids)
    rejected = [st for st in f.trace.steps if st.sample.grammar.rejected is not None]
    accepted = [st for st in f.trace.steps if st.sample.grammar.rejected is None]
    assert rejected and accepted  # (a random model: most of its draws break the pattern)
    for st in rejected:  # drawn again with the grammar first; the refused token was not legal there
        assert st.sample.stage_names[0] == "grammar" and masks[st.step][st.sample.grammar.rejected] == 0
    for st in accepted:  # the chain's own draw, which the grammar allowed: no grammar stage ran
        assert "grammar" not in st.sample.stage_names and st.sample.grammar.removed is None


def test_a_fork_and_a_replay_keep_the_matcher_in_step(torch_model):
    c = Constraint("json_schema", json.dumps(SCHEMA))
    first = run(torch_model, c, 2)[0]
    steps = first.trace.steps
    k = next(i for i, st in enumerate(steps) if st.sample.grammar.legal > 3 and i > 2)  # a step with a choice
    g = steps[k].sample.grammar
    other = next(int(t) for t, ok in zip(steps[k].sample.top_ids, g.legal_top, strict=True)
                 if ok and t != steps[k].token_id)
    fork = run(torch_model, c, 2, inherited=tuple(steps[:k]), force=other, parent=(first.trace.run_id, k))[0]
    assert fork.trace.token_ids[k] == other
    jsonschema.validate(json.loads(fork.trace.text), SCHEMA)
    replay = run(torch_model, c, 2, inherited=tuple(steps[:k]))[0]
    assert replay.trace.token_ids == first.trace.token_ids  # the same seed, the same matcher state: the same run
    illegal = next(int(t) for t, ok in zip(steps[k].sample.top_ids, g.legal_top, strict=True) if not ok)
    broken = run(torch_model, c, 2, inherited=tuple(steps[:k]), force=illegal)[0]
    assert (broken.reason, broken.trace.finish_message) == ("error", broken.message)
    assert broken.message.startswith("the grammar does not allow") and f"at step {k}" in broken.message
    assert len(broken.trace.steps) == k + 1  # the forced step is kept, and the run ends there, saying why


def test_a_matcher_rolls_back_what_a_fork_changed():
    c = Constraint("regex", CODE)
    tok = char_tokenizer()
    m = matcher_for(c, tok, VOCAB, 0)
    ids = tok.encode("123-ab")
    m.mask(ids)
    assert m.consumed == tuple(ids) and m.end(ids) is None
    twin = m.fork()
    assert twin.mask(ids[:2] + tok.encode("4")).sum() == 1  # "124": only "-" may follow
    assert m.mask(ids).sum() > 1 and m.consumed == tuple(ids)  # the original went on alone
    assert m.end([*ids, *tok.encode("xy"), tok.eos]).reason == "eos"  # complete
    assert m.end(ids) is None  # rolled back past the end: it goes on
    broken = m.end([*ids, *tok.encode("!")])
    assert broken.reason == "error" and "'!'" in broken.message and "step 6" in broken.message


def test_a_constraint_that_allows_every_token_changes_nothing_bit_for_bit():
    tok = char_tokenizer()
    everything = Constraint("regex", "(?s).*")
    rng = np.random.default_rng(0)
    free = SamplerSettings(temperature=0.9, top_k=20, top_p=0.9, min_p=0.02, repetition_penalty=1.2)
    bound = free.with_(constraint=everything)
    plain, constrained = History.start(NUMPY, VOCAB, [1, 2]), History.start(NUMPY, VOCAB, [1, 2])
    constrained.grammar = matcher_for(everything, tok, VOCAB, 2)
    for _ in range(40):
        logits, u = rng.normal(size=VOCAB).astype(np.float32) * 3, float(rng.random())
        a, b = sample(NUMPY, logits, free, u, history=plain), sample(NUMPY, logits, bound, u, history=constrained)
        assert b.grammar.legal == VOCAB and b.grammar.removed == 0
        assert (a.token, a.prob, a.final_entropy) == (b.token, b.prob, b.final_entropy)
        np.testing.assert_array_equal(a.probs[-1], b.probs[-1])
        np.testing.assert_array_equal(a.probs[1:], b.probs[2:])  # every stage after the grammar saw the same


@pytest.mark.parametrize(("c", "said"), [
    (Constraint("regex", "[0-9]{2,1}x"), "the regular expression, at character 6: invalid repetition count range"),
    (Constraint("regex", "(ab"), "the regular expression, at character 1: unclosed group"),
    (Constraint("lark", 'start: "a" b\nb: "x" |||\n x y'), "the Lark grammar, line 3, column 4: Expected token"),
    (Constraint("gbnf", 'root ::= "a" ( "b"'), "the GBNF grammar: Expected ')' at line 1"),
    (Constraint("json_schema", '{"type": "object",\n "properties": {"a": }}'),
     "the JSON schema is not JSON at line 2, column 22"),
    (Constraint("json_schema", '{"type": "integer", "minimum": 5, "maximum": 2}'),
     "the JSON schema: Unsatisfiable schema: minimum (5) is greater than maximum (2)"),
])
def test_an_invalid_constraint_is_one_line_naming_the_position(c, said):
    with pytest.raises(ConstraintError) as e:
        check(c)
    assert str(e.value).startswith(said) and "\n" not in str(e.value)
    with pytest.raises(ConstraintError, match=re.escape(said)):
        compile_for(c, char_tokenizer(), VOCAB)


def test_a_constraint_that_does_not_compile_in_time_is_refused(monkeypatch):
    monkeypatch.setattr(constraint_module, "COMPILE_LIMIT_S", 0.0)
    wide = {"type": "object", "properties": {f"p{i}": {"type": "string", "pattern": "[a-z]{3}[0-9]+"} for i in
                                             range(400)}}
    with pytest.raises(ConstraintError, match=r"did not compile within 0 s: make it smaller or simpler"):
        compile_for(Constraint("json_schema", json.dumps(wide)), char_tokenizer(), VOCAB)


def test_a_trace_reopens_with_its_constraint_and_each_steps_grammar(torch_model, tmp_path):
    c = Constraint("choices", "yes\nno\nmaybe", "on_reject")
    trace = run(torch_model, c, 1)[0].trace
    assert trace.text in ("yes", "no", "maybe")
    trace.save(tmp_path / "run.jsonl")
    again = RunTrace.load(tmp_path / "run.jsonl")
    assert again.settings.constraint == c
    assert [st.sample for st in again.steps] == [st.sample for st in trace.steps]
    assert all(st.sample.grammar is not None for st in again.steps)


def test_a_preview_of_a_constrained_step_applies_what_it_recorded(torch_model):
    trace = run(torch_model, Constraint("regex", CODE), 0)[0].trace
    outside = [i for i, st in enumerate(trace.steps) if not st.sample.grammar.legal_top.any()]
    assert outside and len(outside) < len(trace.steps)  # (a random model: some steps allow none of its favourites)
    for i in outside:
        with pytest.raises(ValueError, match="allowed none of this step's 256 recorded candidates"):
            make_preview(trace, i, trace.settings)
    for i, st in enumerate(trace.steps):
        if i in outside:
            continue
        preview = make_preview(trace, i, trace.settings.with_(temperature=0.5))
        s: Sample = preview.sample
        assert s.stage_names[0] == "grammar" and s.grammar == st.sample.grammar
        at = int(np.flatnonzero(st.sample.top_ids == s.token)[0])
        assert st.sample.grammar.legal_top[at]  # the re-sample keeps to what the step allowed
        assert "grammar" in preview.approximate  # (its cut depends on the whole vocabulary)


def test_a_stuck_constrained_run_says_so_once():
    assert stuck([" "] * 31, list(range(31))) is None
    assert stuck(["\n", " "] * 16, list(range(32))) == "the last 32 tokens were only whitespace"
    assert stuck(["a", "b"] * 16, [5, 6] * 16) == "the last 32 tokens repeat a pattern of 2 tokens"
    assert stuck(list("abcdefgh") * 4, list(range(32))) is None


def test_a_repeating_constrained_run_is_said_stuck(torch_model):
    settings = SamplerSettings(temperature=0.0, max_tokens=40, constraint=Constraint("regex", "(ab)+"))
    events = list(generate(torch_model, Request(prompt="x", settings=settings), threading.Event()))
    said = [e for e in events if isinstance(e, Stuck)]
    assert len(said) == 1 and said[0].step == 31 and "repeat a pattern of" in said[0].message
    assert [e for e in events if isinstance(e, Step)][-1].step == 39  # it goes on


def test_the_command_line_reads_one_constraint_and_its_place(tmp_path, capsys):
    from app.cli.flags import settings_from
    from app.cli.generate import parser

    grammar = tmp_path / "g.txt"
    grammar.write_text('root ::= "yes" | "no"\n')
    args = parser().parse_args(["--grammar", str(grammar), "--constraint-place", "on_reject"])
    assert settings_from(args).constraint == Constraint("gbnf", 'root ::= "yes" | "no"\n', "on_reject")
    assert settings_from(parser().parse_args(["--choices", "a, b,c"])).constraint == Constraint("choices", "a\nb\nc")
    with pytest.raises(SystemExit):
        parser().parse_args(["--regex", "(ab"])
    assert "argument --regex: the regular expression, at character 1: unclosed group" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parser().parse_args(["--regex", "a", "--choices", "b"])


# a character-level tokenizer: every token is whole text, so "(?s).*" allows every one of them ------------------------
VOCAB = 96  # end-of-text and the 95 printable ASCII characters


class CharTokenizer:
    """The HF tokenizer wrapper over a tokenizers WordLevel model of single printable characters and end-of-text."""

    def __init__(self) -> None:
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers
        from transformers import PreTrainedTokenizerFast

        from backends.hf.tokenizer import HFTokenizer

        vocab = {"<eos>": 0, **{chr(c): c - 31 for c in range(32, 127)}}
        raw = Tokenizer(models.WordLevel(vocab, unk_token="<eos>"))
        raw.pre_tokenizer = pre_tokenizers.Split("", "isolated")
        raw.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()])
        raw.add_special_tokens(["<eos>"])
        self.hf = HFTokenizer(PreTrainedTokenizerFast(tokenizer_object=raw, eos_token="<eos>"))
        self.eos, self.eos_ids = 0, frozenset({0})

    def encode(self, text: str) -> list[int]:
        return self.hf.encode(text, add_special_tokens=False)

    def token_text(self, token: int) -> str:
        return self.hf.token_text(token)

    def vocabulary_json(self) -> str | None:
        return self.hf.vocabulary_json()


_CHARS: list[CharTokenizer] = []


def char_tokenizer() -> CharTokenizer:
    if not _CHARS:
        _CHARS.append(CharTokenizer())
    return _CHARS[0]


def test_the_character_tokenizer_is_what_these_tests_assume():
    tok = char_tokenizer()
    assert tok.encode("12-a") == [18, 19, 14, 66] and tok.token_text(18) == "1"
    m = Matcher(compile_for(Constraint("regex", "(?s).*"), tok, VOCAB), 0)
    assert m.mask([]).sum() == VOCAB
    assert llg.LLTokenizer(tok.vocabulary_json(), n_vocab=VOCAB).vocab_size == VOCAB
