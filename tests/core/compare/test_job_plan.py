"""Plans of jobs: a sweep's cells in batches capped by rows (a cell never split), a prompt set's prompts one job
each under every target, the base request's model, prompt or chat carried over, and `stop` ending the plan."""

from __future__ import annotations

from app.core.compare.job_plan import CellRun, PromptRun, PromptSetPlan, SweepPlan, Target
from app.core.compare.statistics import make_grid, parse_axis
from app.core.events import Message, Request
from app.core.models.sources import ModelSpec
from app.core.settings import SamplerSettings

BASE = Request(model=ModelSpec("builtin"), prompt="Hi", settings=SamplerSettings(), top_n=7)


def sweep_plan(n: int, batch_rows: int) -> SweepPlan:
    cells = make_grid(SamplerSettings(seed=3), (parse_axis("temperature=0.2,0.7,1.2"), parse_axis("top_p=0.8,1")))
    return SweepPlan([CellRun(c) for c in cells], BASE, n, batch_rows)


def test_a_sweep_plan_gives_its_cells_in_batches_of_whole_cells_then_nothing():
    plan = sweep_plan(n=4, batch_rows=10)  # 6 cells of 4 rows: 2 cells a batch
    jobs = []
    while job := plan.next_job():
        jobs.append(job)
    assert [len(j) for j in jobs] == [2, 2, 2] and plan.jobs == 3
    assert [r.settings for j in jobs for r in j] == [cr.cell.settings for cr in plan.cells]
    assert all((r.n, r.prompt, r.model, r.top_n) == (4, "Hi", BASE.model, 7) for j in jobs for r in j)
    assert [cr.request for cr in plan.cells] == [r for j in jobs for r in j]
    assert len({r.id for j in jobs for r in j}) == 6 and plan.next_job() == ()


def test_a_cell_wider_than_a_batch_is_still_one_job():
    plan = sweep_plan(n=8, batch_rows=4)
    assert len(plan.next_job()) == 1


def test_stop_ends_a_plan_after_the_job_in_progress():
    plan = sweep_plan(n=1, batch_rows=2)
    assert len(plan.next_job()) == 2
    plan.stop()
    assert plan.next_job() == () and plan.jobs == 1
    assert sum(cr.request is None for cr in plan.cells) == 4


def test_a_prompt_set_plan_runs_each_prompt_under_every_target_as_one_job():
    a, b = Target("A", SamplerSettings(temperature=0.5)), Target("B", SamplerSettings(top_k=3), ModelSpec("other"))
    chat = Request(model=ModelSpec("builtin"), messages=(Message("system", "Be brief."), Message("user", "old")))
    runs = [PromptRun(i, p, t) for i, p in enumerate(("one", "two")) for t in (a, b)]
    plan = PromptSetPlan(runs, chat, 2)
    first, second = plan.next_job(), plan.next_job()
    assert [r.messages for r in first] == [(Message("system", "Be brief."), Message("user", "one"))] * 2
    assert [r.prompt for r in second] == ["two", "two"]
    assert [r.model for r in first] == [ModelSpec("builtin"), ModelSpec("other")]
    assert [r.settings for r in first] == [a.settings, b.settings] and all(r.n == 2 for r in first + second)
    assert plan.next_job() == ()
