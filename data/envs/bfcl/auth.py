"""Off-policy calls made before authenticating, for the BFCL classes that have a login.

Two ways to get there, both labelled `off_policy:before_auth`:

- *before the login*: where the ground truth logs in to a class, copies of distinct later
  ground-truth calls of the class are made at seeded points before that login;
- *fresh session*: where a class starts signed in and the ground truth never logs in, the
  episode starts from the scenario with that class signed out (`fresh` below), makes some
  of the class's ground-truth calls early (before the first of them), then logs in
  (`login_arguments`) and carries on with the ground truth. TicketAPI and TradingBot accept
  any non-empty credentials, so their login uses the scenario's user name where it has one
  and fixed placeholders otherwise.

TravelAPI has only the first way: its "session" is the access token every call passes, so
signing it out would fail every later ground-truth call, not one.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from simworld.data.envs.bfcl.plan import (
    Plan,
    PlanContext,
    PlannedCall,
    inserted,
    off_policy_call,
    retimed,
)
from simworld.data.records import JSON

KIND = "before_auth"
_PLACEHOLDER_USER = "user"
_PLACEHOLDER_PASSWORD = "password"


@dataclass(frozen=True)
class AuthRule:
    """How one class signs in: its login tool, how to read the state, how to sign out."""

    class_name: str
    login: str
    signed_in: Callable[[dict[str, JSON]], bool]
    fresh: dict[str, JSON] | None  # config keys for a signed-out session; None: not offered
    login_arguments: Callable[[dict[str, JSON]], dict[str, JSON]]


def _no_arguments(state: dict[str, JSON]) -> dict[str, JSON]:
    return {}


RULES = {
    rule.class_name: rule
    for rule in (
        AuthRule(
            "TwitterAPI",
            "authenticate_twitter",
            lambda s: bool(s.get("authenticated")),
            {"authenticated": False},
            lambda s: {"username": s.get("username"), "password": s.get("password")},
        ),
        AuthRule(
            "TradingBot",
            "trading_login",
            lambda s: bool(s.get("authenticated")),
            {"authenticated": False},
            lambda s: {"username": _PLACEHOLDER_USER, "password": _PLACEHOLDER_PASSWORD},
        ),
        AuthRule(
            "MessageAPI",
            "message_login",
            lambda s: s.get("current_user") is not None,
            {"current_user": None},
            lambda s: {"user_id": s.get("current_user")},
        ),
        AuthRule(
            "TicketAPI",
            "ticket_login",
            lambda s: s.get("current_user") is not None,
            {"current_user": None},
            lambda s: {"username": s.get("current_user"), "password": _PLACEHOLDER_PASSWORD},
        ),
        AuthRule(
            "TravelAPI",
            "authenticate_travel",
            lambda s: s.get("access_token") is not None,
            None,
            _no_arguments,
        ),
    )
}


def auth_sites(ctx: PlanContext) -> list[tuple[str, AuthRule]]:
    """(way, rule) for each involved class that allows a before-auth call."""
    sites: list[tuple[str, AuthRule]] = []
    for class_name in ctx.scenario.involved_classes:
        rule = RULES.get(class_name)
        if rule is None:
            continue
        login = _login_index(ctx, rule)
        if login is not None and _class_calls(ctx, rule, start=login + 1):
            sites.append(("before_login", rule))
        elif login is None and _fresh_session_allowed(ctx, rule):
            sites.append(("fresh_session", rule))
    return sites


def plan_before_auth(ctx: PlanContext, rng: random.Random, count: int) -> Plan | None:
    """A variant with `count` calls made before logging in, or None where none can be."""
    sites = auth_sites(ctx)
    if not sites:
        return None
    way, rule = rng.choice(sites)
    if way == "before_login":
        return _before_login(ctx, rule, rng, count)
    return _fresh_session(ctx, rule, rng, count)


def _login_index(ctx: PlanContext, rule: AuthRule) -> int | None:
    return next((i for i, c in enumerate(ctx.calls) if c.name == rule.login), None)


def _class_calls(ctx: PlanContext, rule: AuthRule, start: int = 0) -> list[int]:
    """Indices from `start` of the class's ground-truth calls other than its login."""
    return [
        i
        for i in range(start, len(ctx.calls))
        if ctx.calls[i].name != rule.login and ctx.tool_class(ctx.calls[i].name) == rule.class_name
    ]


def _fresh_session_allowed(ctx: PlanContext, rule: AuthRule) -> bool:
    state = ctx.state.get(rule.class_name)
    return (
        rule.fresh is not None
        and isinstance(state, dict)
        and rule.signed_in(state)
        and bool(_class_calls(ctx, rule))
    )


def _before_login(ctx: PlanContext, rule: AuthRule, rng: random.Random, count: int) -> Plan:
    login = _login_index(ctx, rule)
    assert login is not None  # auth_sites checked it
    later = _class_calls(ctx, rule, start=login + 1)
    insertions = []
    for source in rng.sample(later, min(count, len(later))):
        point = rng.randint(0, login)
        insertions.append((point, retimed(ctx.calls[source], ctx.calls[point].turn, KIND)))
    insertions.sort(key=lambda item: item[0])
    calls = inserted(ctx.calls, insertions)
    return Plan(f"off_policy:{KIND}", calls, ctx.scenario.initial_config)


def _fresh_session(ctx: PlanContext, rule: AuthRule, rng: random.Random, count: int) -> Plan:
    assert rule.fresh is not None  # auth_sites checked it
    candidates = _class_calls(ctx, rule)
    chosen = sorted(rng.sample(candidates, min(count, len(candidates))))
    point = chosen[0]
    turn = ctx.calls[point].turn
    state = ctx.state[rule.class_name]
    new: list[PlannedCall] = [retimed(ctx.calls[i], turn, KIND) for i in chosen]
    new.append(off_policy_call(KIND, turn, rule.login, rule.login_arguments(state)))
    config = dict(ctx.scenario.initial_config)
    config[rule.class_name] = {**config.get(rule.class_name, {}), **rule.fresh}
    calls = inserted(ctx.calls, [(point, call) for call in new])
    return Plan(f"off_policy:{KIND}", calls, config)


__all__ = ["KIND", "RULES", "AuthRule", "auth_sites", "plan_before_auth"]
