"""Hand-made episodes that reach every corner of the records, for the format tests (the
fixtures in conftest.py wrap them; tests that build variants import them directly)."""

from __future__ import annotations

from simworld.data.records import (
    Episode,
    Message,
    Outcome,
    Provenance,
    Step,
    Task,
    TextAction,
    TextObservation,
    ToolCall,
    ToolCallsAction,
    ToolResult,
    ToolResultsObservation,
    ToolSpec,
    VolatileField,
)

CD_SCHEMA = {"type": "object", "properties": {"folder": {"type": "string"}}}


def _tools() -> list[ToolSpec]:
    return [
        ToolSpec(  # as an OpenAI tool list had it: replays verbatim
            name="cd",
            description="Change directory.",
            input_schema=CD_SCHEMA,
            original={
                "type": "function",
                "function": {
                    "name": "cd",
                    "description": "Change directory.",
                    "parameters": CD_SCHEMA,
                },
            },
        ),
        ToolSpec(  # as an MCP server listed it: output schema and annotations
            name="ls",
            description="List files.",
            input_schema={"type": "object", "properties": {}},
            output_schema={"type": "object", "properties": {"files": {"type": "array"}}},
            annotations={"readOnlyHint": True},
            original={
                "name": "ls",
                "description": "List files.",
                "inputSchema": {"type": "object", "properties": {}},
                "outputSchema": {"type": "object", "properties": {"files": {"type": "array"}}},
                "annotations": {"readOnlyHint": True},
            },
        ),
        ToolSpec(name="echo", description="", input_schema={"type": "object"}),  # no original
    ]


def tool_episode(episode_id: str = "bfcl-mock-0") -> Episode:
    """Tool calls with states, a parallel call, a malformed argument string, an error result,
    text sent with calls, messages before steps and after the last one."""
    first = Step(
        action=ToolCallsAction(
            calls=[
                ToolCall(
                    id="c0",
                    name="cd",
                    arguments={"folder": "docs"},
                    raw_arguments='{"folder":"docs"}',
                ),
                ToolCall(id="c1", name="ls", arguments={}, raw_arguments="{}"),
            ],
            content="Let me look around.",
        ),
        observation=ToolResultsObservation(
            results=[
                ToolResult(call_id="c0", text='{"cwd": "/docs"}', structured={"cwd": "/docs"}),
                ToolResult(
                    call_id="c1", text='{"files": ["a.txt"]}', structured={"files": ["a.txt"]}
                ),
            ]
        ),
        state={"cwd": "/", "files": {"docs": ["a.txt"]}},
        next_state={"cwd": "/docs", "files": {"docs": ["a.txt"]}},
        reward=0.0,
        info={"turn": 0, "latency": None},
        messages=[
            Message(role="system", content="You are a file agent."),
            Message(role="user", content="Show me the docs folder."),
        ],
    )
    second = Step(
        action=ToolCallsAction(
            calls=[ToolCall(id="c2", name="echo", arguments=None, raw_arguments='{"text": "hi')]
        ),
        observation=ToolResultsObservation(
            results=[ToolResult(call_id="c2", text="Error: invalid JSON arguments", is_error=True)]
        ),
        state={"cwd": "/docs", "files": {"docs": ["a.txt"]}},
        next_state={"cwd": "/docs", "files": {"docs": ["a.txt"]}},
        reward=1.0,
        terminated=True,
        messages=[Message(role="assistant", content="The folder holds a.txt.")],
    )
    return Episode(
        episode_id=episode_id,
        env="mock",
        task=Task(
            id="mock-scenario-3", instruction="Show me the docs folder.", apis=["FileSystem"]
        ),
        steps=[first, second],
        tools=_tools(),
        rules=["Paths are relative to the current directory."],
        initial_state={"cwd": "/", "files": {"docs": ["a.txt"]}},
        seed=11,
        provenance=Provenance(source="mock", version="1.0", origin="scenario 3", policy="scripted"),
        outcome=Outcome(success=True, score=1.0, detail="listed"),
        volatile=[VolatileField(key="request_id", kind="id", pattern=r"^req-\d+$")],
        final_messages=[
            Message(role="user", content="Thanks!"),
            Message(role="assistant", content="You're welcome."),
        ],
    )


def text_episode(episode_id: str = "textgame-0") -> Episode:
    """A text game: a system prompt, an initial observation, a hint mid-game."""
    return Episode(
        episode_id=episode_id,
        env="textworld",
        task=Task(id="game-7", instruction="Find the key."),
        steps=[
            Step(
                action=TextAction("open drawer"),
                observation=TextObservation("You open the drawer. It holds a key."),
                reward=0.0,
                messages=[Message(role="system", content="You play a text game.")],
            ),
            Step(
                action=TextAction("take key"),
                observation=TextObservation("Taken."),
                reward=1.0,
                terminated=True,
                messages=[Message(role="user", content="Hint: keys open doors.")],
            ),
        ],
        initial_observation=TextObservation("You are in a kitchen. There is a drawer."),
        seed=3,
        provenance=Provenance(source="textworld", version="1.7.0"),
        outcome=Outcome(success=True),
    )
