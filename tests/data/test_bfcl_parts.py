"""The bfcl env's parts: call parsing, schema conversion, state capture, result
normalisation, the frozen clock, perturbations and off-policy plans."""

from __future__ import annotations

import json
import random

import pytest

pytest.importorskip("bfcl_eval")
pytest.importorskip("mpmath")

from simworld.data.envs.bfcl.backend import (
    Backend,
    CallOutcome,
    is_error_result,
    normalise,
    parse_json,
)
from simworld.data.envs.bfcl.calls import ParsedCall, format_call, parse_call
from simworld.data.envs.bfcl.perturb import perturb_value, synthesize_arguments
from simworld.data.envs.bfcl.plan import PlannedCall, inserted
from simworld.data.envs.bfcl.scenarios import load_scenarios
from simworld.data.envs.bfcl.schemas import convert_schema, function_docs, tool_specs

FS_CONFIG = {
    "GorillaFileSystem": {
        "root": {
            "workspace": {
                "type": "directory",
                "contents": {
                    "document": {
                        "type": "directory",
                        "contents": {"a.txt": {"type": "file", "content": "hello"}},
                    }
                },
            }
        }
    }
}


def test_parse_call_reads_literals_only() -> None:
    assert parse_call("mv(source='a', destination='b')") == ParsedCall(
        "mv", (), {"source": "a", "destination": "b"}
    )
    assert parse_call("mean([1, 2.5])") == ParsedCall("mean", ([1, 2.5],), {})
    assert parse_call("f(x=(1, 2), y=None, z={'k': -3})").kwargs == {
        "x": [1, 2],
        "y": None,
        "z": {"k": -3},
    }
    for bad in ("f(x=os.system('ls'))", "a.f()", "f(**k)", "f(x={1, 2})", "f(", "x + 1"):
        with pytest.raises(ValueError):
            parse_call(bad)


def test_format_call_parses_back() -> None:
    arguments = {"content": "it's", "tags": ["#a"], "n": 2, "ok": True, "none": None}
    text = format_call("post_tweet", arguments)
    assert parse_call(text) == ParsedCall("post_tweet", (), arguments)


def test_convert_schema_maps_types_recursively() -> None:
    bfcl = {
        "type": "dict",
        "properties": {
            "type": {"type": "string", "description": "a property called type"},
            "points": {"type": "array", "items": {"type": "tuple", "items": {"type": "float"}}},
            "meta": {"type": "dict", "properties": {"n": {"type": "integer", "default": 0}}},
        },
        "required": ["points"],
    }
    assert convert_schema(bfcl) == {
        "type": "object",
        "properties": {
            "type": {"type": "string", "description": "a property called type"},
            "points": {"type": "array", "items": {"type": "array", "items": {"type": "number"}}},
            "meta": {"type": "object", "properties": {"n": {"type": "integer", "default": 0}}},
        },
        "required": ["points"],
    }
    with pytest.raises(ValueError, match="unknown BFCL type"):
        convert_schema({"type": "quaternion"})


def test_tool_specs_keep_the_doc_verbatim() -> None:
    (cd,) = [s for s in tool_specs(["GorillaFileSystem"]) if s.name == "cd"]
    (doc,) = [d for d in function_docs("GorillaFileSystem") if d["name"] == "cd"]
    assert cd.original == doc
    assert list(cd.original) == ["name", "description", "parameters", "response"]
    assert cd.input_schema["type"] == "object"
    assert cd.input_schema["additionalProperties"] is False
    assert cd.output_schema == {
        "type": "object",
        "properties": {
            "current_working_directory": {
                "type": "string",
                "description": "The new current working directory path.",
            }
        },
    }
    assert cd.annotations == {"bfcl_class": "GorillaFileSystem"}


def test_tool_docs_agree_with_the_backend_signatures() -> None:
    """The ground for `additionalProperties: false`: docs list exactly the parameters."""
    import inspect

    from simworld.data.envs.bfcl.backend import backend_class
    from simworld.data.envs.bfcl.schemas import MULTI_TURN_CLASSES

    for class_name in MULTI_TURN_CLASSES:
        for spec in tool_specs([class_name]):
            signature = inspect.signature(getattr(backend_class(class_name), spec.name))
            params = [p for p in signature.parameters.values() if p.name != "self"]
            assert set(spec.input_schema["properties"]) == {p.name for p in params}
            no_default = {p.name for p in params if p.default is inspect.Parameter.empty}
            assert set(spec.input_schema["required"]) == no_default


def test_file_system_state_is_the_config_shape_plus_cwd() -> None:
    backend = Backend(["GorillaFileSystem"], FS_CONFIG, long_context=False)
    state = backend.state()["GorillaFileSystem"]
    assert state["root"] == FS_CONFIG["GorillaFileSystem"]["root"]
    assert state["_cwd"] == "/workspace"
    assert backend.execute("cd", {"folder": "document"}).text == (
        '{"current_working_directory": "document"}'
    )
    assert backend.state()["GorillaFileSystem"]["_cwd"] == "/workspace/document"
    assert json.loads(backend.execute("pwd", {}).text) == {
        "current_working_directory": "/workspace/document"
    }


def test_execute_reports_errors_as_bfcl_does() -> None:
    backend = Backend(["GorillaFileSystem"], FS_CONFIG, long_context=False)
    missing = backend.execute("cd", {"folder": "nowhere"})
    assert missing.is_error
    assert missing.structured == {"error": "cd: 'nowhere': No such file or directory"}
    raised = backend.execute("cd", {})
    assert raised.is_error and raised.structured is None
    assert raised.text.startswith("Error during execution: ")
    assert "missing 1 required positional argument: 'folder'" in raised.text
    assert backend.execute("nope", {}).text == "Error during execution: name 'nope' is not defined"
    assert backend.execute("touch", {"file_name": "b.txt"}) == CallOutcome("None", None, False)


def test_normalise_and_error_flags() -> None:
    assert normalise("plain") == "plain"
    assert normalise({"a": 1}) == '{"a": 1}'
    assert normalise({"a": {1, 2}}) == "{'a': {1, 2}}"  # json.dumps fails: str()
    assert normalise(["x"]) == "['x']"
    assert normalise(None) == "None"
    assert parse_json('{"a": NaN}') is None
    assert parse_json("[1, 2]") == [1, 2]
    assert is_error_result({"error": "x"})
    assert is_error_result([{"error": "x"}])
    assert is_error_result(["Error: User not authenticated."])
    assert not is_error_result({"login_status": False})
    assert not is_error_result([])


@pytest.mark.parametrize(
    ("birth", "verified"), [("2006-09-01", True), ("2006-09-02", False), ("1990-01-01", True)]
)
def test_travel_age_check_reads_a_frozen_clock(birth: str, verified: bool) -> None:
    config = {"TravelAPI": {"user_first_name": "Ana", "user_last_name": "Li"}}
    backend = Backend(["TravelAPI"], config, long_context=False)
    arguments = {
        "first_name": "Ana",
        "last_name": "Li",
        "date_of_birth": birth,
        "passport_number": "US123",
    }
    result = backend.execute("verify_traveler_information", arguments)
    assert result.structured["verification_status"] is verified


def test_message_ids_are_seeded_and_state_sets_are_sorted() -> None:
    def send() -> tuple[str, object]:
        backend = Backend(["MessageAPI"], {"MessageAPI": {"current_user": "USR001"}}, False)
        texts = [backend.execute("send_message", {"receiver_id": "USR002", "message": m}).text]
        texts.append(backend.execute("send_message", {"receiver_id": "USR003", "message": m}).text)
        return json.dumps(texts), backend.state()["MessageAPI"]["generated_ids"]

    m = "hi"
    first, ids = send()
    assert (first, ids) == send()
    assert ids == sorted(ids) and len(ids) == 2


@pytest.mark.parametrize("value", ["final_report.pdf", "USR001", "a", "", 0, 3, -2, 2.5, True])
def test_perturbations_change_the_value_and_keep_its_type(value: object) -> None:
    for seed in range(30):
        changed = perturb_value(value, random.Random(seed))
        assert changed != value
        assert type(changed) is type(value) or value == ""


def test_perturbations_of_containers_keep_dict_keys() -> None:
    rng = random.Random(0)
    for _ in range(20):
        changed = perturb_value({"title": "x", "priority": 2}, rng)
        assert isinstance(changed, dict) and set(changed) == {"title", "priority"}
        assert perturb_value(["a", "b"], rng) != ["a", "b"]


def test_synthesized_arguments_fill_the_required_ones() -> None:
    schema = {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"enum": ["x"]}, "c": {"type": "string"}},
        "required": ["a", "b"],
    }
    arguments = synthesize_arguments(schema, random.Random(1))
    assert set(arguments) == {"a", "b"} and arguments["b"] == "x"


def test_inserted_places_calls_before_their_index() -> None:
    calls = [PlannedCall(0, f"t{i}", {}, f"t{i}()") for i in range(3)]
    new = [PlannedCall(0, f"n{i}", {}, f"n{i}()", "off_policy:x") for i in range(3)]
    out = inserted(calls, [(0, new[0]), (3, new[1]), (0, new[2])])
    assert [c.name for c in out] == ["n0", "n2", "t0", "t1", "t2", "n1"]
    with pytest.raises(IndexError):
        inserted(calls, [(4, new[0])])


def test_scenarios_share_their_index_across_categories() -> None:
    base = load_scenarios("base")
    miss_param = load_scenarios("miss_param")
    assert len(base) == len(miss_param) == 200
    assert [s.index for s in base] == [s.index for s in miss_param] == list(range(200))
    assert base[0].excluded_function == ["cp"]
    assert load_scenarios("miss_func")[0].missed_function == {3: ["sort"]}


def test_printed_sets_are_sorted_whatever_the_hash_seed() -> None:
    cards = {"c1": {"card_number": "4111", "expiration_date": "12/30", "balance": 900.0}}
    config = {"TravelAPI": {"access_token": "t", "credit_card_list": cards}}
    travel = Backend(["TravelAPI"], config, long_context=False)
    booking = {
        "access_token": "t",
        "card_id": "c1",
        "travel_date": "2024-12-01",
        "travel_from": "SFO",
        "travel_to": "LAX",
        "travel_class": "luxury",
    }
    assert travel.execute("book_flight", booking).structured["error"] == (
        "Invalid travel class. Must be one of {'business', 'economy', 'first'}"
    )
    ticket = Backend(["TicketAPI"], {"TicketAPI": {"current_user": "ann"}}, long_context=False)
    ticket.execute("create_ticket", {"title": "t"})
    (made,) = ticket.state()["TicketAPI"]["ticket_queue"]
    edit = ticket.execute("edit_ticket", {"ticket_id": made["id"], "updates": {"zz": 1, "aa": 2}})
    assert edit.structured == {"error": "Invalid fields for update: aa, zz"}
