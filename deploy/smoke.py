#!/usr/bin/env python3
"""After a deployment: check a sandbox server (or the Service in front of many) end to end.

    python3 deploy/smoke.py http://127.0.0.1:8080
    kubectl -n llm-sandbox port-forward svc/llm-sandbox 8080 & python3 deploy/smoke.py http://127.0.0.1:8080

Standard library only. Checks readiness, one program per served language, a timeout, a memory
cap, no network and the unprivileged user, and a Python session keeping state; prints one line
per check, exits 1 if any failed.
"""

from __future__ import annotations

import json
import sys
import urllib.error
import urllib.request

SUM_PROGRAMS = {  # read "40 2", print 42
    "python": "print(sum(map(int, input().split())))",
    "bash": "read a b; echo $((a + b))",
    "cpp": "#include <bits/stdc++.h>\nint main(){long a,b;std::cin>>a>>b;std::cout<<a+b<<std::endl;}",
    "java": "import java.util.*;public class Main{public static void main(String[] x){"
            "Scanner s=new Scanner(System.in);System.out.println(s.nextLong()+s.nextLong());}}",
    "nodejs": "const [a,b]=require('fs').readFileSync(0,'utf8').trim().split(' ').map(Number);console.log(a+b)",
    "go": "package main\nimport \"fmt\"\nfunc main(){var a,b int;fmt.Scan(&a,&b);fmt.Println(a+b)}",
    "rust": "use std::io::*;fn main(){let mut s=String::new();stdin().read_to_string(&mut s).unwrap();"
            "let v:Vec<i64>=s.split_whitespace().map(|x|x.parse().unwrap()).collect();println!(\"{}\",v[0]+v[1]);}",
    "c": "#include <stdio.h>\nint main(void){long a,b;scanf(\"%ld %ld\",&a,&b);printf(\"%ld\\n\",a+b);}",
    "typescript": "const [a, b]: number[] = require('fs').readFileSync(0, 'utf8').split(' ').map(Number); console.log(a + b)",
    "ruby": "a, b = gets.split.map(&:to_i); puts a + b",
    "php": "[$a, $b] = explode(' ', trim(fgets(STDIN))); echo $a + $b, \"\\n\";",
    "perl": "my ($a, $b) = split ' ', <STDIN>; print $a + $b, \"\\n\";",
    "lua": "local a, b = io.read('*n', '*n'); print(a + b)",
    "R": "x <- scan(file('stdin'), quiet = TRUE); cat(sum(x), '\\n', sep = '')",
    "julia": "a, b = parse.(Int, split(readline())); println(a + b)",
}


def call(url: str, path: str, body: dict | None = None, timeout: float = 120) -> tuple[int, dict]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url + path, data=data, headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as exc:
        return exc.code, json.load(exc)


def run(url: str, language: str, code: str, **extra) -> dict:
    status, answer = call(url, "/run_code", {"language": language, "code": code, "compile_timeout": 60, **extra})
    if status != 200:
        raise RuntimeError(f"HTTP {status}: {answer}")
    return answer


def checks(url: str):
    status, ready = call(url, "/readyz", timeout=10)
    yield "ready", status == 200, ready.get("problems") or ready.get("backend")
    for language in ready.get("languages", []):
        if language == "sql":
            answer = run(url, "sql", "SELECT 40 + 2;")
        elif language in SUM_PROGRAMS:
            answer = run(url, language, SUM_PROGRAMS[language], stdin="40 2")
        else:
            continue
        out = (answer.get("run_result") or {}).get("stdout")
        yield f"{language} runs", answer["status"] == "Success" and out == "42\n", answer["message"] or repr(out)
    slow = run(url, "python", "while True: pass", run_timeout=1)
    yield "timeout enforced", slow["run_result"]["status"] == "TimeLimitExceeded", slow["message"]
    hog = run(url, "python", "x = bytearray(600 << 20)", memory_limit_MB=256)
    yield "memory cap enforced", hog["oom_killed"] is True, hog["message"]
    net = run(url, "python", "import os, socket\nprint(os.getuid())\nsocket.create_connection(('1.1.1.1', 53), timeout=2)")
    yield "no network, uid 65534", net["status"] == "Failed" and net["run_result"]["stdout"] == "65534\n", \
        net["run_result"]["stderr"].strip().splitlines()[-1:]
    status, session = call(url, "/v1/sessions", {"language": "python"})
    if status != 201:
        yield "session keeps state", False, f"HTTP {status}: {session}"
        return
    run(url, "python", "x = 41", session_id=session["session_id"])
    kept = run(url, "python", "print(x + 1)", session_id=session["session_id"])
    yield "session keeps state", kept["run_result"]["stdout"] == "42\n", kept["message"] or kept["run_result"]
    request = urllib.request.Request(f"{url}/v1/sessions/{session['session_id']}", method="DELETE")
    with urllib.request.urlopen(request, timeout=60) as response:
        yield "session deleted", response.status == 204, response.status


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    url = argv[1].rstrip("/")
    failed = 0
    try:
        for name, ok, detail in checks(url):
            failed += not ok
            print(f"{'ok  ' if ok else 'FAIL'} {name}: {detail}")
    except (OSError, RuntimeError) as exc:
        print(f"FAIL cannot talk to {url}: {exc} (is the server up? `docker logs` / `kubectl logs` says why)")
        return 1
    print("all checks passed" if not failed else f"{failed} check(s) failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
