"""Off-policy variants of a BFCL ground truth, so that recordings hold error observations.

BFCL's ground truth never errs (0 of 4,625 calls), but agents in training do. A variant
replays the ground truth, inserts off-policy calls of one kind at seeded points, and
carries on with the rest of the ground truth; the real backend answers whatever happens,
later ground-truth calls included. The kinds:

- `perturbed_args`: a ground-truth call made first with one argument value perturbed
  (a near-miss name, another id, a negative amount; see `perturb`), right before the real
  call, the way an agent retries after a mistake;
- `missing_arg`: a ground-truth call made first without one of its required arguments;
- `wrong_tool`: at a seeded point, another tool of the involved classes, with arguments the
  ground truth gave that tool somewhere in the category, or made up from its schema;
- `before_auth`: calls made before logging in (see `auth`).

    plan = plan_variant(ctx, variant=0, rng=random.Random(7), offset=2, count=3)

A variant inserts `count` calls of its kind (at distinct ground-truth calls where the kind
copies one; a fresh session adds its login). The kind is the applicable kinds' entry at
`offset + variant`, so an entry's variants cycle through the kinds that apply to it.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

from simworld.data.envs.bfcl.auth import auth_sites, plan_before_auth
from simworld.data.envs.bfcl.perturb import perturb_value, synthesize_arguments
from simworld.data.envs.bfcl.plan import Plan, PlanContext, PlannedCall, inserted, off_policy_call
from simworld.data.envs.bfcl.schemas import required_arguments

KINDS = ("perturbed_args", "missing_arg", "wrong_tool", "before_auth")


def applicable_kinds(ctx: PlanContext) -> list[str]:
    """The kinds that can make at least one off-policy call in this entry."""
    return [kind for kind in KINDS if _SITES[kind](ctx)]


def plan_variant(
    ctx: PlanContext, variant: int, rng: random.Random, offset: int, count: int
) -> Plan | None:
    """The plan of off-policy variant `variant`, or None when no kind applies."""
    kinds = applicable_kinds(ctx)
    if not kinds:
        return None
    kind = kinds[(offset + variant) % len(kinds)]
    if kind == "before_auth":
        plan: Plan | None = plan_before_auth(ctx, rng, count)
        return plan
    calls = _BUILDERS[kind](ctx, rng, count)
    return Plan(f"off_policy:{kind}", calls, ctx.scenario.initial_config)


def _with_arguments(ctx: PlanContext) -> list[int]:
    return [i for i, call in enumerate(ctx.calls) if call.arguments]


def _perturbed_args(ctx: PlanContext, rng: random.Random, count: int) -> list[PlannedCall]:
    sites = _with_arguments(ctx)
    insertions = []
    for point in sorted(rng.sample(sites, min(count, len(sites)))):
        source = ctx.calls[point]
        key = rng.choice(sorted(source.arguments))
        arguments = {**source.arguments, key: perturb_value(source.arguments[key], rng)}
        new = off_policy_call("perturbed_args", source.turn, source.name, arguments)
        insertions.append((point, new))
    calls: list[PlannedCall] = inserted(ctx.calls, insertions)
    return calls


def _missing_sites(ctx: PlanContext) -> list[int]:
    return [i for i, call in enumerate(ctx.calls) if _present(ctx, call)]


def _missing_arg(ctx: PlanContext, rng: random.Random, count: int) -> list[PlannedCall]:
    sites = _missing_sites(ctx)
    insertions = []
    for point in sorted(rng.sample(sites, min(count, len(sites)))):
        source = ctx.calls[point]
        dropped = rng.choice(_present(ctx, source))
        arguments = {k: v for k, v in source.arguments.items() if k != dropped}
        new = off_policy_call("missing_arg", source.turn, source.name, arguments)
        insertions.append((point, new))
    calls: list[PlannedCall] = inserted(ctx.calls, insertions)
    return calls


def _present(ctx: PlanContext, call: PlannedCall) -> list[str]:
    """The required arguments of the call's tool that the call passes."""
    spec = ctx.tools.get(call.name)
    return [] if spec is None else [a for a in required_arguments(spec) if a in call.arguments]


def _wrong_tool_sites(ctx: PlanContext) -> list[int]:
    return list(range(len(ctx.calls) + 1)) if len(ctx.tools) > 1 else []


def _wrong_tool(ctx: PlanContext, rng: random.Random, count: int) -> list[PlannedCall]:
    insertions = []
    last_turn = max(len(ctx.scenario.turns) - 1, 0)
    for point in sorted(rng.choice(_wrong_tool_sites(ctx)) for _ in range(count)):
        here = ctx.calls[point] if point < len(ctx.calls) else None
        name = rng.choice(sorted(n for n in ctx.tools if here is None or n != here.name))
        seen = ctx.pool.get(name, ())
        schema = ctx.tools[name].input_schema
        arguments = dict(rng.choice(seen)) if seen else synthesize_arguments(schema, rng)
        turn = last_turn if here is None else here.turn
        insertions.append((point, off_policy_call("wrong_tool", turn, name, arguments)))
    calls: list[PlannedCall] = inserted(ctx.calls, insertions)
    return calls


_SITES: dict[str, Callable[[PlanContext], Sequence[object]]] = {
    "perturbed_args": _with_arguments,
    "missing_arg": _missing_sites,
    "wrong_tool": _wrong_tool_sites,
    "before_auth": auth_sites,
}
_BUILDERS: dict[str, Callable[[PlanContext, random.Random, int], list[PlannedCall]]] = {
    "perturbed_args": _perturbed_args,
    "missing_arg": _missing_arg,
    "wrong_tool": _wrong_tool,
}

__all__ = ["KINDS", "applicable_kinds", "plan_variant"]
