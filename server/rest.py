"""The native REST API (protocols.md §8.1.3): episodes driven with OpenAI tool calls, text,
or simworld actions, and one-shot simulation. Shapes: wire.py.

    GET    /v1/envs                        -> {"envs": [EnvInfo]}
    POST   /v1/episodes                    {"env", "task_id"?, "seed"?, "initial_state"?}
                                           -> 201 Created {"episode_id", "tools", ...}
    POST   /v1/episodes/{id}/step          {"tool_calls": [...]} | {"text"} | {"action"}
                                           -> StepOut {"observation", "messages", "reward",
                                              "terminated", "truncated", "info"}
    GET    /v1/episodes/{id}               -> EpisodeView (state, task, steps so far, done)
    DELETE /v1/episodes/{id}               -> {"episode_id", "closed": true}
    POST   /v1/simulate                    {"env", "task_id"?, "state"?, "seed"?, + one action}
                                           -> Simulated (StepOut + "env", "task_id", "state")

    curl -s localhost:8000/v1/episodes -d '{"env": "bfcl", "task_id": "bfcl-4"}' \\
         -H 'content-type: application/json'

Statuses: an unknown env, task or episode id (closed, expired, or another token's) is 404;
a body that cannot be an action, or an action of the wrong kind for the env, is 422 naming
the field; stepping a finished episode is 409; past the session limit, 429. A tool call the
env would refuse (unknown tool, arguments that are not JSON or break the tool's schema) is
not an HTTP error: the step answers it with the error result the real API gives (info
source "validation") and leaves the state as it was.

`/v1/simulate` answers one action from a given state without keeping a session: a
throwaway session of the env is reset to the task (`task_id`, or one chosen by `seed`, or
the first) with `state` as its state (omitted: the task's own initial state), takes the
action through the same validation and routing (rules, real backend, cache, model) as any
step, and is dropped: it counts against no session limit and is never recorded.
"""

from __future__ import annotations

from fastapi import APIRouter, status

from simworld.server.deps import HubDep, OwnerDep
from simworld.server.wire import (
    Closed,
    Created,
    CreateEpisode,
    EnvList,
    EpisodeView,
    SimulateBody,
    Simulated,
    StepBody,
    StepOut,
    action_of,
    created,
    env_info,
    episode_view,
    simulated,
    step_out,
)

router = APIRouter(prefix="/v1", tags=["native REST"])

# Routes are plain `def`s: FastAPI runs them in its thread pool, so sessions step in
# parallel and their model calls meet in the batching model.


@router.get("/envs")
def list_envs(hub: HubDep) -> EnvList:
    """The envs served here, with their tasks, tools and step limits."""
    return EnvList(envs=[env_info(env) for env in hub.envs.values()])


@router.post("/episodes", status_code=status.HTTP_201_CREATED)
def create_episode(body: CreateEpisode, hub: HubDep, owner: OwnerDep) -> Created:
    """Start an episode; its id (server-chosen, unguessable) names it from now on."""
    live, first = hub.open(
        body.env, owner, task_id=body.task_id, seed=body.seed, initial_state=body.initial_state
    )
    return created(live, first, hub.env(body.env))


@router.post("/episodes/{episode_id}/step")
def step_episode(episode_id: str, body: StepBody, hub: HubDep, owner: OwnerDep) -> StepOut:
    """Take one action in the episode."""
    return step_out(hub.step(episode_id, owner, action_of(body)))


@router.get("/episodes/{episode_id}")
def get_episode(episode_id: str, hub: HubDep, owner: OwnerDep) -> EpisodeView:
    """The episode so far: task, state, steps, whether it is over."""
    return episode_view(hub.episode(episode_id, owner))


@router.delete("/episodes/{episode_id}")
def delete_episode(episode_id: str, hub: HubDep, owner: OwnerDep) -> Closed:
    """End the episode; its id is unknown from now on."""
    hub.close(episode_id, owner)
    return Closed(episode_id=episode_id, closed=True)


@router.post("/simulate")
def simulate(body: SimulateBody, hub: HubDep) -> Simulated:
    """One stateless prediction: the answer to an action from a task and a state."""
    task_id, result, after = hub.simulate(
        body.env, action_of(body), task_id=body.task_id, state=body.state, seed=body.seed
    )
    return simulated(result, body.env, task_id, after)


__all__ = ["router"]
