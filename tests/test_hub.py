"""Session ids and the slots for live conversations (`--max-sessions`)."""

import pytest

import app.web.hub as hub_module
from app.web.hub import BUSY, Busy, SessionHub


def test_no_limit_by_default():
    hub = SessionHub()
    sessions = [hub.create() for _ in range(50)]
    assert hub.live == 50 and hub.refused == 0
    assert len({s.sid for s in sessions}) == 50 and all(len(s.sid) >= 24 for s in sessions)


def test_a_session_beyond_the_limit_is_refused_and_counted_until_one_goes_away():
    hub = SessionHub(max_live=2)
    page, script = hub.create(), hub.create(script=True)
    with pytest.raises(Busy, match=BUSY):
        hub.create()
    with pytest.raises(Busy):
        hub.create(script=True)
    assert (hub.live, hub.refused) == (2, 2)
    hub.release(page.sid)  # the tab closed
    other = hub.create()
    assert hub.live == 2
    hub.attach(script.sid)
    hub.detach(script.sid)  # a script's channel closed: its conversation is over
    assert hub.live == 1
    assert hub.get(script.sid) is script  # the record stays for the export
    hub.detach(other.sid)  # a page's channel closing is a network blip: it reconnects
    assert hub.live == 1 and hub.attach(other.sid) is other


def test_a_session_that_went_away_needs_a_slot_to_come_back():
    hub = SessionHub(max_live=1)
    script = hub.create(script=True)
    hub.attach(script.sid)
    hub.detach(script.sid)
    page = hub.create()
    with pytest.raises(Busy):
        hub.attach(script.sid)
    hub.release(page.sid)
    assert hub.attach(script.sid) is script and hub.live == 1
    assert hub.attach("never-issued") is None


def test_a_script_that_never_connects_gives_its_slot_back(monkeypatch):
    monkeypatch.setattr(hub_module, "CONNECT_S", 0.0)
    hub = SessionHub(max_live=1)
    hub.create(script=True)
    assert hub.live == 0
    hub.create()  # a page: held until its tab closes
    with pytest.raises(Busy):
        hub.create()


def test_tickets_are_issued_here_and_used_once():
    hub = SessionHub(max_live=1)
    ticket = hub.ticket()
    assert hub.redeem(ticket) and not hub.redeem(ticket)
    assert not hub.redeem("made-up")


def test_records_make_room_but_live_sessions_stay():
    hub = SessionHub(max_live=3, keep=3)
    live = [hub.create() for _ in range(2)]
    gone = hub.create()
    hub.release(gone.sid)
    hub.create()  # the fourth record: the one that went away makes room
    assert hub.get(gone.sid) is None and all(hub.get(s.sid) is s for s in live)
