#!/usr/bin/env python3
"""Writes the seed corpus of every fuzz target under fuzz/corpus/<target>/.

The seeds are committed; this script is how they were made (run it again
after changing a format: it rewrites only the seed-*.txt files, never a
crash input a fuzz run found, which is named crash-*).
"""
import hashlib
import hmac
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))


def sha(b):
    return hashlib.sha256(b).hexdigest()


def manifest(entries):
    return {"entries": entries}


def pin(entries):
    canonical = json.dumps(entries, separators=(",", ":"), ensure_ascii=False)
    return sha(canonical.encode())


def wire(key, identities, header, parent, metadata, content, buffers=()):
    parts = [json.dumps(p) for p in (header, parent, metadata, content)]
    sig = hmac.new(key.encode(), "".join(parts).encode(), hashlib.sha256).hexdigest() if key else ""
    # "|" separates frames in the input, so the delimiter is written "<IDS>";
    # the target puts "<IDS|MSG>" back and re-signs.
    return "|".join([key, *identities, "<IDS>", sig, *parts, *buffers])


def header(msg_type, msg_id="3e1f0c7c-5a0b-4f3e-9a53-1f2d3c4b5a69"):
    return {"msg_id": msg_id, "msg_type": msg_type, "session": "s1", "username": "u",
            "date": "2026-01-01T00:00:00.000000Z", "version": "5.3"}


NONCE = "cordon-end-0123456789abcdef0123456789abcdef"

ENTRIES = [
    {"path": "bin/tool", "sha256": sha(b"tool"), "size": 4, "executable": True},
    {"path": "lib/a.py", "sha256": sha(b"a"), "size": 1, "executable": False},
    {"path": "lib/b.py", "sha256": sha(b""), "size": 0, "executable": False},
]
UTF8_ENTRIES = [{"path": "données/é.txt", "sha256": sha(b"x"), "size": 1, "executable": False}]

MOUNTINFO_HYBRID = """22 27 0:21 / /proc rw,relatime - proc proc rw
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw,nsdelegate
"""
CGROUP_HYBRID = """9:name=systemd:/user.slice
8:pids:/user.slice/user-1000.slice
4:memory:/process_api/0a8b
2:cpu,cpuacct:/
0::/user.slice
"""
MOUNTINFO_V2 = """25 30 0:23 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
26 30 0:24 / /mnt/with\\040space rw - cgroup2 none rw
"""
CGROUP_V2 = "0::/system.slice/cordon.service\n"

SEEDS = {
    "api_run_body": [
        '{"argv": ["/bin/echo", "hi"]}',
        '{"shell": "echo $X", "env": {"X": "1"}, "stdin": "in", "workspace": "/tmp/w", '
        '"owner": "agent", "permissive": true}',
        '{"argv": ["cat"], "stdin_b64": "aGVsbG8=", "limits": {"timeout_ms": 5000, '
        '"grace_ms": 100, "output_limit_bytes": 1048576, "memory_bytes": 268435456, "pids": 64, '
        '"cpu_seconds": 10, "file_size_bytes": 1024, "open_files": 64, '
        '"address_space_bytes": 18446744073709551615}}',
        '{"argv": ["true"], "isolation": {"level": "strict", "network": "host"}, '
        '"require": ["memory", "process_tree", "network"]}',
        '{"argv": ["true"], "isolation": "none", "require": ["bogus"], "extra": 1}',
        '{"argv": "not-an-array", "limits": {"pids": -1.5}}',
        '[1, 2, 3]',
    ],
    "api_session_body": [
        '{}',
        '{"id": "s1", "kind": "shell", "ttl_s": 3600, "fresh_workspace": true}',
        '{"kind": "python", "env": {"A": "b"}, "isolation": "strict", '
        '"limits": {"memory_bytes": 1073741824}, "require": ["filesystem"], "permissive": false}',
        '{"kind": "ruby", "ttl_s": 0}',
        '{"isolation": {"level": "standard", "network": "none"}, "ttl_s": 99999999999}',
    ],
    "api_exec_body": [
        '{"command": "ls -la"}',
        '{"command": "cat", "stdin": "data\\n", "timeout_ms": 1000}',
        '{"code": "print(1)", "timeout_ms": 30000}',
        '{"code": ""}',
        '{"command": "x", "code": "y"}',
        '{"command": "", "timeout_ms": -5}',
    ],
    "api_files_request": [
        "/v1/sessions/s1/files/notes.txt\n\nhello",
        "/v1/sessions/s1/files/dir/sub/a.bin?offset=0\n" + sha(b"abc") + "\nabc",
        "/v1/sessions/s1/files/big.dat?offset=4096\n" + sha(b"") + "\n",
        "/v1/sessions/s%201/files/a%2Fb/..%2F..%2Fetc?offset=18446744073709551616\nABC\nx",
        "/v1/sessions/s1/files?dir=sub%2Fdir&x\n\n",
        "/v1/sessions/s1/files/./x?offset=-1&offset=+2\n" + "A" * 64 + "\n",
    ],
    "policy_toml": [
        'isolation = "standard"\nnetwork = "none"\n',
        'isolation = "strict"\nnetwork = "host"\n'
        'ro_binds = [{src = "/opt/data", dst = "/data"}]\nbinds = [{src = "/srv/out"}]\n'
        'tmp_size_bytes = 268435456\nuid_range = {first = 1000000000, count = 65536}\n'
        'system_dirs = ["/usr", "/etc"]\nhidden_paths = ["/etc/shadow"]\n'
        'seccomp = {deny = ["chmod", "fchmod"]}\ntimeout_ms = 5000\ngrace_ms = 100\n'
        'output_limit_bytes = 1048576\nmemory_bytes = 536870912\npids = 64\ncpu_seconds = 10\n'
        'file_size_bytes = 1048576\nopen_files = 256\naddress_space_bytes = 4294967296\n',
        '[limits]\ntimeout_ms = "soon"\n',
        'ro_binds = [{dst = "/x"}, 3]\nunknown = 1\n',
        'memory_bytes = 9223372036854775807\npids = -1\nuid_range = {first = -1, count = 1e9}\n',
        'isolation = \n',
    ],
    "closure_manifest": [
        json.dumps(manifest(ENTRIES), indent=2),
        json.dumps(manifest(UTF8_ENTRIES), ensure_ascii=False),
        json.dumps(manifest(list(reversed(ENTRIES)))),
        '{"entries": [{"path": "a", "sha256": "' + sha(b"") + '", "size": 0, '
        '"executable": false, "path": "b"}]}',
        '{"entries": [{"path": "../x", "sha256": "00", "size": -1, "executable": 1}]}',
        '{"entries": [{"path": "a", "sha256": "' + sha(b"") + '", "size": 0, "executable": false},'
        ' {"path": "a/b", "sha256": "' + sha(b"") + '", "size": 0, "executable": false}]}',
        '{"entries": []}',
    ],
    "closure_pin": [
        pin(ENTRIES) + "\n" + json.dumps(manifest(ENTRIES)),
        pin(UTF8_ENTRIES) + "\n" + json.dumps(manifest(UTF8_ENTRIES), ensure_ascii=False),
        pin(ENTRIES) + "\n" + json.dumps(manifest(UTF8_ENTRIES)),
        "not-a-pin\n" + json.dumps(manifest(ENTRIES)),
    ],
    "identity_json": [
        '{"pid": 1234, "ppid": 1, "start_ticks": 143852, '
        '"boot_id": "6f1c1b8e-7d0e-4c55-9b0e-2a6b1f3d4c5e"}',
        '{"pid": 2147483647, "ppid": 0, "start_ticks": 9223372036854775807, "boot_id": "b"}',
        '{"pid": 0, "ppid": -1, "start_ticks": 18446744073709551615, "boot_id": ""}',
        '{"pid": 1.5, "ppid": true, "start_ticks": "1", "boot_id": 3, "extra": null}',
        '[]',
    ],
    "cli_units": ["250ms", "1.5s", "2m", "0.5", "16K", "256MiB", "1g", "8TB", "64",
                  "9223372036854775807", "-1", "1.", ".5s", "8796093022208T"],
    "gateway_client_message": [
        json.dumps({"channel": "shell", "header": header("execute_request"), "parent_header": {},
                    "metadata": {}, "content": {"code": "1+1", "silent": False}, "buffers": []}),
        json.dumps({"header": {"msg_type": "kernel_info_request"}}),
        json.dumps({"channel": "control", "header": {"msg_type": "interrupt_request",
                                                     "msg_id": 5}}),
        json.dumps({"channel": "stdin", "header": header("input_reply"),
                    "content": {"value": "yes"}, "parent_header": []}),
        json.dumps({"channel": "iopub", "header": header("status")}),
        json.dumps({"header": header("execute_request"), "buffers": ["AAAA"]}),
        '{"header": "x"}',
    ],
    "jupyter_wire": [
        wire("secret", ["kernel.1234"], header("execute_reply"),
             header("execute_request", "p1"), {}, {"status": "ok", "execution_count": 1}),
        wire("secret", [], header("stream"), {}, {}, {"name": "stdout", "text": "hi\n"},
             ["YnVm", "raw\x00bytes"]),
        wire("", ["a", "b"], header("status"), {}, {}, {"execution_state": "idle"}),
        "secret|id|<IDS>|0000|{}|{}|{}|{}",
        "secret|<IDS>|sig|[1]|{}|{}|{}",
        "k|no delimiter|x",
    ],
    "shell_framing": [
        "\x01hello\n" + NONCE + " 0\n",
        "\x07partial out" + NONCE + " 127\nafter",
        "\x00stderr line\n" + NONCE + "\n",
        "\x03" + "cordon-end-fake 0\n" + NONCE[:20] + "x\n" + NONCE + " 2",
        "\x11" + "no marker at all \x00\xff",
        "\x05" + NONCE + " -1\n" + NONCE + " 3\n",
    ],
    "proc_stat": [
        "9569 (cat) R 9564 9564 4213 0 -1 4194304 100 0 0 0 0 0 0 0 20 0 1 0 143852 3133440 361 "
        "18446744073709551615 94397120028672 94397120048553 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n",
        "42 (a) b) 1 2 (x) S 1 42 42 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 99 0 0\n",
        "7 () Z 1 7 7 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 18446744073709551615 0 0\n",
        "1 (init) S 0 1 1 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1\n",
        "x (y) RR 1 1 1\n",
    ],
    "proc_fdinfo": [
        "pos:\t0\nflags:\t02000002\nmnt_id:\t15\nino:\t1057\nPid:\t1234\nNSpid:\t1234\n",
        "pos:\t0\nflags:\t02000002\nmnt_id:\t15\nino:\t1057\nPid:\t-1\nNSpid:\t-1\n",
        "pos:\t0\nPid: \t 0\n",
        "Pid:\t5\n",
    ],
    "proc_cgroup_layout": [
        MOUNTINFO_HYBRID + "--\n" + CGROUP_HYBRID,
        MOUNTINFO_V2 + "--\n" + CGROUP_V2,
        "41 31 0:38 / /sys/fs/cgroup/a\\134b\\011 rw - cgroup cgroup rw,memory,pids\n--\n"
        "3:memory,pids:/x\n3:memory:/y\n",
        "bad line\n--\nno colons\n",
    ],
    "mcp_jsonrpc": [
        '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"c","version":"1"}}}',
        '{"jsonrpc":"2.0","method":"notifications/initialized"}',
        '{"jsonrpc":"2.0","id":"a-1","method":"tools/call","params":{"name":"run","arguments":{"command":"echo hi"},"_meta":{"progressToken":7}}}',
        '{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":3,"reason":"user"}}',
        '{"jsonrpc":"2.0","id":2,"method":"logging/setLevel","params":{"level":"info"}}',
        '{"jsonrpc":"2.0","id":9,"result":{}}',
        '{"jsonrpc":"2.0","id":9,"error":{"code":-32601,"message":"no"}}',
        '[{"jsonrpc":"2.0","id":1,"method":"ping"}]',
        '{"jsonrpc":"2.0","id":1.5,"method":"ping","params":[1]}',
        '{"jsonrpc":"1.0","id":null,"method":3}',
        '{"jsonrpc":"2.0","id":18446744073709551615,"method":"x\\u0000y","params":{"a":1e400}}',
        '{"jsonrpc":"2.0","id":"\udcff\udcfe","method":"ping"}',
        # 2026-07-28: no initialize, the version and capabilities in _meta.
        '{"jsonrpc":"2.0","id":"discover-1","method":"server/discover","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"c","version":"1"},"io.modelcontextprotocol/clientCapabilities":{}}}}',
        '{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"run","arguments":{"command":"echo hi"},"_meta":{"progressToken":"p","io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/logLevel":"info"}}}',
        '{"jsonrpc":"2.0","id":5,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":1900,"io.modelcontextprotocol/clientCapabilities":[]}}}',
    ],
    "cgroup_procs": ["1234\n5678\n", "", "1\n", "99999999999\n12\n", "12 x 13\n\n14"],
}


def main():
    for target, seeds in SEEDS.items():
        d = os.path.join(HERE, "corpus", target)
        os.makedirs(d, exist_ok=True)
        for name in os.listdir(d):
            if name.startswith("seed-"):
                os.remove(os.path.join(d, name))
        for i, seed in enumerate(seeds):
            data = seed.encode("utf-8", "surrogateescape") if isinstance(seed, str) else seed
            with open(os.path.join(d, "seed-%02d.txt" % i), "wb") as f:
                f.write(data)


if __name__ == "__main__":
    main()
