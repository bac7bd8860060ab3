"""A closed encrypted Loom leaves its keyring behind nowhere (ADR 0049, amended "sealcost"):
the registry that finds a keyring by its engine (``keyring_for``) held the keyring, which holds
the engine, so neither was ever freed, nor the data keys the keyring had unwrapped.
"""

from __future__ import annotations

import gc
import weakref

from loom_runtime import FlowContext, Loom, MasterKey, keyring_for

KEY = MasterKey(b"k" * 32)


def test_a_closed_encrypted_loom_frees_its_keyring_engine_and_keys(db_url: str) -> None:
    """While open, the log's engine finds the keyring; once closed and dropped, the keyring
    and the engine are garbage, so no unwrapped data key outlives the Loom."""
    with Loom(db_url, encryption=KEY) as loom:

        @loom.flow("note")
        def note(ctx: FlowContext, text: str) -> str:
            return ctx.decide("shout", lambda: text.upper())

        loom.run("note", text="hello")
        engine = loom.log.engine
        keyring = loom._keyring
        assert keyring is not None and keyring_for(engine) is keyring
        assert keyring._cache  # the execution's data key, unwrapped
        gone_keyring = weakref.ref(keyring)
        gone_engine = weakref.ref(engine)
    assert keyring_for(engine) is None
    del loom, keyring, engine, note
    gc.collect()
    assert gone_keyring() is None
    assert gone_engine() is None
