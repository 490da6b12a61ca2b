#!/usr/bin/python3
"""Times a Jupyter Kernel Gateway-style server the way its clients use it:
create a kernel, run `1+1` over a new websocket per execution (as
AutoGen's and DocsGPT's executors do), delete it. Prints one JSON object:
create_ms (POST /api/kernels until 201), first_result_ms (from the create
request until the first execution's reply and idle), round_trip_ms (median
of later executions, websocket connect included) and round_trip_open_ms
(median over one websocket kept open).

    kernel_gateway_bench.py --url http://127.0.0.1:8888 --token T [--runs 30]
"""
import argparse
import json
import statistics
import time
import uuid

import requests
import websocket


def execute(ws, code, session):
    msg_id = uuid.uuid4().hex
    ws.send(json.dumps({
        "header": {"msg_id": msg_id, "username": "bench", "session": session,
                   "msg_type": "execute_request", "version": "5.3"},
        "parent_header": {}, "metadata": {}, "channel": "shell",
        "content": {"code": code, "silent": False, "store_history": True,
                    "user_expressions": {}, "allow_stdin": False, "stop_on_error": True},
    }))
    replied = idle = False
    result = None
    while not (replied and idle):
        msg = json.loads(ws.recv())
        if msg.get("parent_header", {}).get("msg_id") != msg_id:
            continue
        kind = msg.get("msg_type") or msg["header"]["msg_type"]
        if kind == "execute_reply":
            replied = True
        elif kind == "status" and msg["content"].get("execution_state") == "idle":
            idle = True
        elif kind == "execute_result":
            result = msg["content"]["data"].get("text/plain")
    return result


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--url", required=True)
    p.add_argument("--token", required=True)
    p.add_argument("--runs", type=int, default=30)
    a = p.parse_args()
    headers = {"Authorization": f"token {a.token}"}
    ws_url = a.url.replace("http", "ws", 1)
    session = uuid.uuid4().hex

    t0 = time.monotonic()
    r = requests.post(f"{a.url}/api/kernels", headers=headers, json={"name": "python3"})
    r.raise_for_status()
    created = time.monotonic()
    kernel = r.json()["id"]
    channels = f"{ws_url}/api/kernels/{kernel}/channels?session_id={session}"

    def one():
        ws = websocket.create_connection(channels, header=[f"Authorization: token {a.token}"])
        try:
            return execute(ws, "1+1", session)
        finally:
            ws.close()

    first = one()
    first_done = time.monotonic()
    assert first == "2", first
    trips = []
    for _ in range(a.runs):
        s = time.monotonic()
        assert one() == "2"
        trips.append(time.monotonic() - s)
    ws = websocket.create_connection(channels, header=[f"Authorization: token {a.token}"])
    open_trips = []
    for _ in range(a.runs):
        s = time.monotonic()
        assert execute(ws, "1+1", session) == "2"
        open_trips.append(time.monotonic() - s)
    ws.close()
    requests.delete(f"{a.url}/api/kernels/{kernel}", headers=headers).raise_for_status()
    print(json.dumps({
        "create_ms": round((created - t0) * 1000, 2),
        "first_result_ms": round((first_done - t0) * 1000, 2),
        "round_trip_ms": round(statistics.median(trips) * 1000, 2),
        "round_trip_open_ms": round(statistics.median(open_trips) * 1000, 2),
        "runs": a.runs,
    }))


if __name__ == "__main__":
    main()
