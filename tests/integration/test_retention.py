"""Retention (cordon serve --keep-records) against a real daemon and its
real store: what ended longer ago than the option says is forgotten, in the
store and in the daemon, and nothing that still matters is: a live
session, its active grant, a lost session's record and workspace. An
ended session is let go from the daemon's memory and read back from its
record as it was."""
import os
import sqlite3
import sys
import threading
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "clients", "python"))

from cordon_client import ConflictError, CordonError, NotFoundError  # noqa: E402

from daemon_support import (  # noqa: E402  (tests/integration/daemon_support.py)
    Daemon,
    logged,
    mounts_beneath,
    store_query,
    wait_for,
)

KEEP = "2s"  # so the daemon looks every second (a tenth, at least 1 s)


def grant_ids(state_dir):
    return {row[0] for row in store_query(state_dir, "SELECT id FROM grants")}


def session_state(state_dir, sid):
    rows = store_query(state_dir, "SELECT state FROM sessions WHERE id = ?", (sid,))
    return rows[0][0] if rows else None


def test_ended_records_are_forgotten_and_live_ones_kept(state_dir):
    d = Daemon(state_dir, "--keep-records", KEEP)
    try:
        c = d.client()
        run = c.run(["/bin/true"], isolation="none")
        assert run["exit_code"] == 0
        ran = run["grant"]["id"]
        closed = c.session("closed-one", isolation="none")
        closed.exec("echo hi")
        closed_grant = closed.refresh()["grant_id"]
        closed.close()
        live = c.session("live-one", isolation="none")
        live_grant = live.refresh()["grant_id"]
        assert {ran, closed_grant, live_grant} <= grant_ids(state_dir)
        assert session_state(state_dir, "closed-one") == "closed"

        # Back long before this 30 s bound: 2 s of age, then a look each second.
        wait_for(lambda: ran not in grant_ids(state_dir) and
                 session_state(state_dir, "closed-one") is None, within=30)
        assert closed_grant not in grant_ids(state_dir)
        with pytest.raises(NotFoundError):
            c.request("GET", "/v1/sessions/closed-one")
        assert "closed-one" not in {s["id"] for s in c.sessions()}

        # The live session, its active grant, and what it runs, are untouched.
        assert live_grant in grant_ids(state_dir)
        assert live.exec("echo still here")["stdout"] == "still here\n"
        assert session_state(state_dir, "live-one") == "ready"
        # The id of a forgotten session is free for a new one.
        again = c.session("closed-one", isolation="none")
        assert again.exec("echo new")["stdout"] == "new\n"
        again.close()
        live.close()
    finally:
        d.stop()
    with open(d.log_path) as f:
        assert '"records_pruned"' in f.read()


def test_a_lost_session_is_kept_past_the_retention(state_dir):
    d = Daemon(state_dir, "--keep-records", KEEP)
    c = d.client()
    s = c.session("lost-one", isolation="none")
    s.put_file("notes.txt", b"keep me\n")
    d.kill()  # a crash: the session is lost at the next start
    d = Daemon(state_dir, "--keep-records", KEEP)
    try:
        c = d.client()
        assert c.request("GET", "/v1/sessions/lost-one")["state"] == "lost"
        # Retention has looked several times once this marker is pruned.
        marker = c.run(["/bin/true"], isolation="none")["grant"]["id"]
        wait_for(lambda: marker not in grant_ids(state_dir), within=30)
        assert session_state(state_dir, "lost-one") == "lost"
        # Re-created with its id, it has the workspace it had.
        s = c.session("lost-one", isolation="none")
        assert s.get_file("notes.txt") == b"keep me\n"
        s.close()
    finally:
        d.stop()


def health(daemon):
    return daemon.client().request("GET", "/v1/health")


def test_ended_sessions_are_let_go_and_read_back_from_their_records(state_dir):
    # The daemon holds what has not ended; an ended session, once nothing
    # about it is under way, is kept on record only. Read back, it is what
    # it was; its id goes on as before; and a workspace it kept, still
    # mounted, is let go when the daemon stops.
    d = Daemon(state_dir, "--prespawn-runs", "0")
    try:
        c = d.client()
        ids = []
        for i in range(6):
            s = c.session(f"ended-{i}", env={"N": str(i)}, ttl_s=100 + i)
            assert s.exec("echo $N > f; cat f")["stdout"] == f"{i}\n"
            s.close(keep_workspace=i % 2 == 0)
            ids.append(s.id)
        bad = c.session("ended-invalidated", limits={"grace_ms": 200})
        r = bad.exec("trap '' INT; sleep 30", timeout_ms=200)
        assert r["invalidated"] is True, r
        ids.append(bad.id)
        live = c.session("still-live")
        before = {sid: c.request("GET", f"/v1/sessions/{sid}") for sid in ids}
        assert before["ended-1"]["ttl_s"] == 101 and before["ended-1"]["state"] == "closed"
        assert before["ended-invalidated"]["state"] == "invalidated"

        # Let go within a tick or two (a second each): only the live one is held.
        assert wait_for(lambda: health(d)["sessions_held"] == 1, within=30), health(d)
        after = {sid: c.request("GET", f"/v1/sessions/{sid}") for sid in ids}
        assert after == before
        listed = {s["id"]: s for s in c.sessions()}
        assert set(listed) == set(ids) | {"still-live"}
        assert {sid: listed[sid] for sid in ids} == before
        # What reading them back held again is let go again.
        assert wait_for(lambda: health(d)["sessions_held"] == 1, within=30), health(d)

        # Their ids go on: a next generation, a refusal that names the state,
        # a delete that removes what the invalidated one left.
        again = c.session("ended-0")
        assert again.info["generation"] == 2
        assert again.exec("ls")["stdout"] == ""  # a fresh workspace
        with pytest.raises(ConflictError) as e:
            c.request("POST", "/v1/sessions/ended-invalidated/exec", {"command": "true"})
        assert "invalidated" in e.value.message
        gone = c.request("DELETE", "/v1/sessions/ended-invalidated")
        assert gone["state"] == "closed"
        assert not os.path.exists(os.path.join(state_dir, "workspaces", "ended-invalidated"))
        assert live.exec("echo ok")["stdout"] == "ok\n"
        kept = os.path.join(state_dir, "workspaces", "ended-2")
        assert os.path.isdir(kept)
    finally:
        assert d.stop() == 0
    # The kept workspaces' filesystems (loop images) were let go at the
    # stop, though their sessions were no longer held; the images stay.
    assert mounts_beneath(state_dir) == []
    assert os.path.isfile(kept + ".img")


def test_a_record_the_store_cannot_read_is_a_500_and_changes_nothing(state_dir):
    # An ended session that is no longer held is read from the store. When
    # the store cannot answer, the request fails as the host's fault (500,
    # naming the record): not "no session", not a create that starts the
    # id over at generation 1 with its record overwritten, not a list of
    # the held sessions alone.
    d = Daemon(state_dir, "--prespawn-runs", "0")
    try:
        c = d.client()
        c.session("on-record").close()
        assert wait_for(lambda: health(d)["sessions_held"] == 0, within=30), health(d)

        db = sqlite3.connect(os.path.join(state_dir, "cordon.db"), timeout=30)
        try:
            db.execute("ALTER TABLE sessions RENAME TO sessions_away")
            db.commit()
            for method, target, body, says in [
                ("GET", "/v1/sessions/on-record", None, "session on-record's record"),
                ("DELETE", "/v1/sessions/on-record", None, "session on-record's record"),
                ("POST", "/v1/sessions/on-record/exec", {"command": "true"},
                 "session on-record's record"),
                ("POST", "/v1/sessions", {"id": "on-record"}, "session on-record's record"),
                # Not a list of what is held alone, as if that were all.
                ("GET", "/v1/sessions", None, "cannot read the sessions' records"),
            ]:
                with pytest.raises(CordonError) as e:
                    c.request(method, target, body)
                assert e.value.status == 500, (method, target, e.value)
                assert says in e.value.message, e.value
        finally:
            db.execute("ALTER TABLE sessions_away RENAME TO sessions")
            db.commit()
            db.close()

        assert c.request("GET", "/v1/sessions/on-record")["state"] == "closed"
        again = c.session("on-record")
        assert again.info["generation"] == 2
        assert again.exec("echo ok")["stdout"] == "ok\n"
    finally:
        assert d.stop() == 0


def test_records_the_store_refused_are_written_once_it_takes_them_without_a_flood_of_errors(
        state_dir):
    # Sessions that end while the store refuses their records stay held and
    # their records are written again later. While the store keeps refusing,
    # the daemon backs off instead of trying (and logging) each of them
    # every second; once it takes them, every record says closed and the
    # sessions are let go.
    d = Daemon(state_dir, "--prespawn-runs", "0")
    try:
        c = d.client()
        sessions = [c.session(f"refused-{i}") for i in range(3)]
        db = sqlite3.connect(os.path.join(state_dir, "cordon.db"), timeout=30)
        try:
            db.execute("ALTER TABLE sessions RENAME TO sessions_away")
            db.commit()
            for s in sessions:
                assert c.request("DELETE", f"/v1/sessions/{s.id}")["state"] == "closed"
            assert wait_for(lambda: len(logged(d, "store_error")) >= 3, within=30)
            time.sleep(8)  # the window observed: the daemon's ticks, one a second
            errors = logged(d, "store_error")
        finally:
            db.execute("ALTER TABLE sessions_away RENAME TO sessions")
            db.commit()
            db.close()
        # Each close's own write, then one retry at a time, backing off (1,
        # 2, 4 s...): 7 seen in 9 s; before, 3 more every tick (27).
        assert len(errors) <= 10, [e.get("session_id") for e in errors]

        def recorded():
            return {r[0]: r[1] for r in store_query(state_dir, "SELECT id, state FROM sessions")}

        want = {s.id: "closed" for s in sessions}
        assert wait_for(lambda: recorded() == want, within=90), recorded()
        assert wait_for(lambda: health(d)["sessions_held"] == 0, within=30), health(d)
    finally:
        assert d.stop() == 0


def test_the_list_of_sessions_is_filtered_by_kind_and_state_and_paged(state_dir):
    d = Daemon(state_dir, "--prespawn-runs", "0")
    try:
        c = d.client()
        live = c.session("listed-live")
        for i in range(3):
            c.session(f"listed-closed-{i}").close()
        bad = c.session("listed-invalidated", limits={"grace_ms": 200})
        assert bad.exec("trap '' INT; sleep 30", timeout_ms=200)["invalidated"] is True
        # Held or read back from their records, the filter is the same.
        assert wait_for(lambda: health(d)["sessions_held"] == 1, within=30), health(d)

        def ids(**kw):
            return [s["id"] for s in c.sessions(**kw)]

        closed = [f"listed-closed-{i}" for i in range(3)]
        assert ids() == sorted(closed + ["listed-invalidated", "listed-live"])
        assert ids(states=["closed"]) == closed
        assert ids(states=["ready", "busy"]) == [live.id]
        assert ids(states=["invalidated", "ready"]) == ["listed-invalidated", live.id]
        assert ids(kind="shell", states=["ready"]) == [live.id]
        assert ids(kind="python") == []
        assert all(s["state"] == "closed" for s in c.sessions(states=["closed"]))
        # A busy one is listed as busy, not as the ready its record says.
        busy = c.session("listed-busy")
        running = threading.Thread(target=busy.exec, args=("sleep 3",))
        running.start()
        try:
            assert wait_for(lambda: ids(states=["busy"]) == [busy.id], within=30)
            assert ids(states=["ready"]) == [live.id]
        finally:
            running.join()
        assert ids(states=["ready"]) == [busy.id, live.id]

        # A page at a time, held sessions and records in one order: each
        # page's last id, passed as `after`, gives the next, and the pages
        # together are the whole list, each once.
        whole = ids()
        assert whole == sorted(closed + ["listed-busy", "listed-invalidated", "listed-live"])
        for size in (1, 2, 4, len(whole), 1000):
            pages, after = [], None
            while True:
                query = f"limit={size}" + (f"&after={after}" if after else "")
                page = c.request("GET", "/v1/sessions?" + query)
                assert 0 < len(page["sessions"]) <= size, (query, page)
                pages += [s["id"] for s in page["sessions"]]
                if "next" not in page:
                    break
                assert page["next"] == pages[-1], (query, page)
                after = page["next"]
            assert pages == whole, size
        assert ids(limit=3) == whole[:3]
        # `after` is a place in the order, not a session that must exist.
        page = c.request("GET", "/v1/sessions?state=closed&after=listed-closed-0x&limit=1")
        assert [s["id"] for s in page["sessions"]] == ["listed-closed-1"]
        assert page["next"] == "listed-closed-1"
        assert c.request("GET", "/v1/sessions?after=zzz") == {"sessions": []}

        for query, field, says in [
            ("state=done", "state", 'no state "done" (states: starting, ready, busy, closed'),
            ("state=", "state", 'no state ""'),
            ("state=ready,,busy", "state", 'no state ""'),
            ("kind=perl", "kind", 'must be "shell" or "python", got "perl"'),
            ("kind=", "kind", 'must be "shell" or "python", got ""'),
            ("page=3", "page", "unknown query parameter (known: kind, state, after, limit)"),
            ("limit=0", "limit", "must be from 1 to 1000, got 0"),
            ("limit=1001", "limit", "must be from 1 to 1000, got 1001"),
            ("limit=ten", "limit", 'must be a whole number from 1 to 1000, got "ten"'),
            ("limit=", "limit", 'must be a whole number from 1 to 1000, got ""'),
            ("limit=-1", "limit", "must be from 1 to 1000, got -1"),
            ("after=", "after", 'must be a session id (^[A-Za-z0-9_-]{1,64}$), got ""'),
            ("after=a%2Fb", "after", 'must be a session id (^[A-Za-z0-9_-]{1,64}$), got "a/b"'),
            ("state=ready&state=closed", "state", "state: given more than once"),
        ]:
            with pytest.raises(CordonError) as e:
                c.request("GET", "/v1/sessions?" + query)
            assert e.value.status == 400 and e.value.field == field, (query, e.value)
            assert says in e.value.message, (query, e.value)
        assert live.exec("echo ok")["stdout"] == "ok\n"
    finally:
        assert d.stop() == 0
