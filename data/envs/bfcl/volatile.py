"""The BFCL values that come from a seeded RNG: predictable from the seed, not from the state.

Each backend seeds `random.Random` from the scenario's `random_seed` (or a default), so a
replay is exact, but a model that sees only the state cannot know the next draw. These are
the result and state keys those draws land in (the `pattern` is a regex over the value's
JSON text; it also admits the hand-written values some scenario configs put under the same
key, such as TravelAPI's access_token "abc123xyz", so every recorded occurrence matches):

| class | key | where the draw shows |
|---|---|---|
| MessageAPI | new_id | send_message's `message_id` ({"new_id": 5 digits}) |
| MessageAPI | generated_ids | state: the set of ids drawn so far |
| TravelAPI | access_token | authenticate_travel (6 digits); state |
| TravelAPI | card_id | register_credit_card (12 digits) |
| TravelAPI | booking_id, transaction_id | book_flight (7 / 8 digits); state booking_record |
| TravelAPI | insurance_id | purchase_insurance (9 digits) |
| VehicleControlAPI | outsideTemperature | get_outside_temperature_* (uniform -10..40) |
| VehicleControlAPI | currentSpeed | get_current_speed (uniform 0..120) |
| TradingBot | timestamp | state transaction_history, from fund_account / withdraw_funds |

Not expressible as a key: TravelAPI also draws the starting `balance` of a registered card
and uses card and booking ids as keys of `credit_card_list` / `booking_record`. `balance`
is left out on purpose: the name also holds TradingBot's deterministic account balance.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from simworld.data.records import VolatileField

_NUMBER = r"-?\d+(\.\d+)?([eE][-+]?\d+)?"
_ID_STRING = r'"[\w.\-]+"'

VOLATILE_BY_CLASS: dict[str, tuple[VolatileField, ...]] = {
    "MessageAPI": (
        VolatileField("new_id", "id", r"\d{5}"),
        VolatileField("generated_ids", "id", r"\[\s*(\d{5}\s*(,\s*\d{5}\s*)*)?\]"),
    ),
    "TravelAPI": (
        VolatileField("access_token", "token", r'"[^"\\]+"|null'),
        VolatileField("card_id", "id", _ID_STRING),
        VolatileField("booking_id", "id", _ID_STRING),
        VolatileField("transaction_id", "id", _ID_STRING),
        VolatileField("insurance_id", "id", _ID_STRING),
    ),
    "VehicleControlAPI": (
        VolatileField("outsideTemperature", "noise", _NUMBER),
        VolatileField("currentSpeed", "noise", _NUMBER),
    ),
    "TradingBot": (
        VolatileField("timestamp", "timestamp", r'"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(\.\d+)?"'),
    ),
}


def volatile_fields(classes: Sequence[str] | None = None) -> list[VolatileField]:
    """Fresh copies of the volatile fields of `classes` (all when None), in table order."""
    names = VOLATILE_BY_CLASS if classes is None else [c for c in classes if c in VOLATILE_BY_CLASS]
    return [replace(field) for name in names for field in VOLATILE_BY_CLASS[name]]


__all__ = ["VOLATILE_BY_CLASS", "volatile_fields"]
