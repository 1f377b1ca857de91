"""Load with live histories: ``recommend`` latency when known users are answered from a history store, and a
soak that ingests and recommends at once across a retrain and a hot reload.

    taskset -c 1 python benchmarks/live_load.py          # -> benchmarks/results/live_load.{json,md}
    taskset -c 1 python benchmarks/live_load.py --soak   # adds the soak to the same files
    python benchmarks/live_load.py --render              # only rewrite the .md from the .json

**Load.** The ML-1M SASRec checkpoint of ``benchmarks/load_test.py`` (``runs/load-test/sasrec-ml1m``,
trained there when missing; max length 200, 3,416 items) is served by ``python -m attnrec serve
--store SPEC`` (one torch thread, the default micro-batching) with the store a SQLite file (WAL,
``synchronous=FULL``, the default) or a private ``redis-server`` (append-only file, ``appendfsync
everysec``, Redis's own default once the file is on). Before any request, ``--events`` events for each of
``--users`` known users are sent through ``POST /v1/events`` in batches of 1,000 (items drawn from the
catalog, timestamps after every training event), so that every requested user's history is its
training history plus stored events, read from the store on each request. Then a separate client
process (``load_harness.drive_raw``: hand-written keep-alive HTTP/1.1) sends ``--requests``
``POST /v1/recommend {"user": U, "k": 10}`` for those users at concurrency 1 and 32, after a warm-up,
and records client-side latency percentiles, errors (an answer that is not 200 with k items) and the
server's CPU per request. The same requests against the same model without a store are the baseline
row: what the store adds. A check after each store's rows asks for 20 of the users and counts items of
their stored events in the answers (must be none: seen items are excluded).

**Soak** (``--soak``). A SASRec trained briefly on ml-latest-small (one ML-1M epoch is minutes here, too
long for a 90 s soak) is served with a SQLite store and an API key. For ``--soak-seconds`` a client
keeps ``--soak-concurrency`` connections busy with ``recommend`` for known users while another sends
``POST /v1/events`` batches (50 events, known and new users) every 0.2 s. Ten seconds in, ``attnrec
retrain --model DIR --store ... --data ratings.csv.gz --out NEW --max-epochs 1 --reload URL`` exports the
store's events, warm-starts, saves and hot-reloads the server; then the new directory is reloaded once
more through ``POST /v1/admin/reload``. Claims: zero failed requests (recommend: 200 with k items;
events: 200 with every event accepted), the retrain and both reloads succeed, and every acknowledged
event is either in the retrained model's log or still in the store (the events that arrived after the
retrain's export).

Everything (server, client, redis-server, retrain) runs where this script is pinned (``taskset -c 1``:
one core of a 2-core machine whose other core runs other jobs), so the figures are for one shared core.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import re
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from load_harness import Server, proc_status, redis_server  # noqa: E402
from load_test import CACHE, RESULTS, run_client, train_ml1m  # noqa: E402
from provenance import git_sha  # noqa: E402
from soak import Connection, request_bytes  # noqa: E402

API_KEY = "live-load-key-0123456789abcdef"
T0 = 2_000_000_000  # after every training event of the ML-1M checkpoint: appended at the end of a history
MLLS = Path(os.environ.get("ATTNREC_MLLS", "/work/shared/data/ml-latest-small/ratings.csv.gz"))
OUT = RESULTS / "live_load"


# -- stores ----------------------------------------------------------------------------------------
@contextmanager
def store_spec(kind: str, directory: Path) -> Iterator[str]:
    """The ``--store`` value of a fresh store of ``kind`` in ``directory`` (a private redis-server is
    started for ``redis`` and stopped on exit)."""
    if kind == "sqlite":
        yield str(directory / "events.db")
        return
    with redis_server(directory, "everysec") as url:
        yield url


# -- the load study --------------------------------------------------------------------------------
def known(model_dir: Path) -> tuple[list[str], list[str]]:
    maps = json.loads((model_dir / "id_maps.json").read_text())
    return list(maps["users"]), list(maps["items"])


def ingest(url: str, users: list[str], items: list[str], per_user: int, seed: int) -> dict[str, Any]:
    """``per_user`` events for each user through ``POST /v1/events`` (1,000 a request); what each user got."""
    import httpx

    rng = random.Random(seed)
    events: list[dict[str, Any]] = [
        {"user": u, "item": rng.choice(items), "timestamp": T0 + n} for n in range(per_user) for u in users
    ]
    t = time.perf_counter()
    accepted = 0
    with httpx.Client(base_url=url, timeout=120) as client:
        for i in range(0, len(events), 1000):
            r = client.post("/v1/events", json={"events": events[i : i + 1000]})
            r.raise_for_status()
            accepted += r.json()["accepted"]
    seconds = time.perf_counter() - t
    given: dict[str, list[str]] = {}
    for e in events:
        given.setdefault(e["user"], []).append(e["item"])
    return {"events": len(events), "accepted": accepted, "seconds": seconds, "given": given}


def seen_in_answers(url: str, given: dict[str, list[str]], n: int = 20) -> dict[str, int]:
    """For ``n`` users, how many items of their stored events their answer holds (must be 0)."""
    import httpx

    hits = 0
    for u in list(given)[:n]:
        r = httpx.post(f"{url}/v1/recommend", json={"user": u, "k": 10}, timeout=60)
        r.raise_for_status()
        hits += len(set(given[u]) & {x["item"] for x in r.json()["items"]})
    return {"users": n, "stored_items_in_answers": hits}


def load_rows(
    model_dir: Path, store: str | None, users: list[str], args: argparse.Namespace, work: Path
) -> dict[str, Any]:
    _, items = known(model_dir)
    extra = [] if store is None else ["--store", store]
    server = Server(
        "sasrec", model_dir, 1, extra, cpus={args.server_cpu} if args.server_cpu is not None else None
    )
    kind = "none" if store is None else "redis" if store.startswith("redis") else "sqlite"
    out: dict[str, Any] = {"store": kind, "rows": []}
    try:
        out["ready_s"] = server.wait_ready()
        if store is not None:
            got = ingest(server.url, users, items, args.events, args.seed)
            out["ingest"] = {k: v for k, v in got.items() if k != "given"}
            print(
                f"{out['store']}: {got['accepted']:,} events in {got['seconds']:.1f}s through HTTP "
                f"({got['accepted'] / got['seconds']:,.0f}/s)",
                flush=True,
            )
        rng = random.Random(args.seed)
        for c in args.levels:
            bodies = [{"user": rng.choice(users), "k": 10} for _ in range(args.requests)]
            bodies_file = work / f"bodies-{out['store']}-{c}.json"
            bodies_file.write_text(json.dumps(bodies))
            before = proc_status(server.proc.pid)
            load_before = os.getloadavg()[0]
            warmup = min(50, args.requests // 10)
            res = run_client(server.url, bodies_file, c, warmup, "raw")
            after = proc_status(server.proc.pid)
            res["server_cpu_ms_per_request"] = (
                1000 * (after["cpu_s"] - before["cpu_s"]) / (args.requests + warmup)
            )
            res["server_rss_mib"] = after["VmRSS"]
            res["loadavg_1min"] = max(load_before, os.getloadavg()[0])
            out["rows"].append(res)
            print(
                f"{out['store']:6s} c={c:<3d} p50 {res['p50_ms']:7.2f} p99 {res['p99_ms']:7.2f} ms "
                f"{res['rps']:6.1f} req/s errors {res['errors']} server cpu "
                f"{res['server_cpu_ms_per_request']:.2f} ms/req load {res['loadavg_1min']:.1f}",
                flush=True,
            )
        if store is not None:
            out["live_check"] = seen_in_answers(server.url, got["given"])
    finally:
        server.stop()
    return out


# -- the soak --------------------------------------------------------------------------------------
def train_small(seconds: float) -> Path:
    out = CACHE / "sasrec-ml-latest-small"
    if (out / "config.json").exists():
        return out
    import torch

    from attnrec import Recommender
    from attnrec.cli._common import load_data

    torch.set_num_threads(1)
    data = load_data(str(MLLS))
    rec = Recommender("sasrec", train={"time_budget": seconds, "max_epochs": 200, "threads": 1}, auto=True)
    rec.fit(data, progress=False)
    return rec.save(out)


async def soak(
    url: str, model_dir: Path, store: str, new_dir: Path, seconds: float, concurrency: int, seed: int
) -> dict[str, Any]:
    host, port = url.removeprefix("http://").split(":")
    where = f"{host}:{port}"
    users, items = known(model_dir)
    rng = random.Random(seed)
    counts: Counter[str] = Counter()
    latencies: list[float] = []
    failures: list[str] = []
    acknowledged = 0
    lifecycle: dict[str, Any] = {}
    done = asyncio.Event()
    start = time.monotonic()

    async def recommender(w: int) -> None:
        conn = Connection(host, int(port))
        while not done.is_set():
            body = {"user": rng.choice(users), "k": 10}
            t = time.perf_counter()
            status, payload, _ = await conn.call(
                request_bytes(where, "/v1/recommend", json.dumps(body).encode(), key=API_KEY)
            )
            latencies.append(time.perf_counter() - t)
            counts[f"recommend {status}"] += 1
            if status != 200 or len(json.loads(payload).get("items", [])) != 10:
                failures.append(f"recommend {status} {payload[:200]!r}")
        conn.close()

    async def ingester() -> None:
        nonlocal acknowledged
        conn = Connection(host, int(port))
        n = 0
        while not done.is_set():
            events = []
            for _ in range(50):
                user = rng.choice(users) if rng.random() < 0.9 else f"new-{rng.randrange(200)}"
                events.append({"user": user, "item": rng.choice(items), "timestamp": int(time.time())})
            n += 1
            status, payload, _ = await conn.call(
                request_bytes(where, "/v1/events", json.dumps({"events": events}).encode(), key=API_KEY)
            )
            counts[f"events {status}"] += 1
            if status != 200 or json.loads(payload).get("accepted") != len(events):
                failures.append(f"events {status} {payload[:200]!r}")
            else:
                acknowledged += len(events)
            await asyncio.sleep(0.2)
        conn.close()

    async def operator() -> None:
        await asyncio.sleep(10)
        t = time.monotonic()
        cmd = [
            sys.executable,
            "-m",
            "attnrec",
            "retrain",
            "--model",
            str(model_dir),
            "--store",
            store,
            "--data",
            str(MLLS),
            "--out",
            str(new_dir),
            "--max-epochs",
            "1",
            "--reload",
            url,
            "--served-name",
            "sasrec",
            "--admin-key",
            API_KEY,
        ]
        proc = await asyncio.create_subprocess_exec(
            *cmd, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
        )
        output, _ = await proc.communicate()
        lifecycle["retrain"] = {
            "started_at_s": round(t - start, 1),
            "seconds": round(time.monotonic() - t, 1),
            "returncode": proc.returncode,
            "output_tail": output.decode(errors="replace")[-600:],
        }
        await asyncio.sleep(5)
        conn = Connection(host, int(port))
        t = time.monotonic()
        body = json.dumps({"model": "sasrec", "path": str(new_dir)}).encode()
        status, payload, _ = await conn.call(request_bytes(where, "/v1/admin/reload", body, key=API_KEY))
        conn.close()
        lifecycle["reload"] = {
            "at_s": round(t - start, 1),
            "status": status,
            "seconds": round(time.monotonic() - t, 2),
            "answer": payload[:300].decode(errors="replace"),
        }
        await asyncio.sleep(max(10.0, seconds - (time.monotonic() - start)))
        done.set()

    await asyncio.gather(operator(), ingester(), *(recommender(w) for w in range(concurrency)))
    lat = np.array(latencies) * 1000
    return {
        "seconds": round(time.monotonic() - start, 1),
        "counts": dict(sorted(counts.items())),
        "failed": len(failures),
        "failure_samples": failures[:5],
        "events_acknowledged": acknowledged,
        "recommend_p50_ms": float(np.percentile(lat, 50)),
        "recommend_p99_ms": float(np.percentile(lat, 99)),
        "recommend_max_ms": float(lat.max()),
        **lifecycle,
    }


def run_soak(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    model_dir = train_small(args.soak_train_seconds)
    serve_dir = CACHE / "live-soak" / "v1"
    new_dir = CACHE / "live-soak" / "v2"
    shutil.rmtree(CACHE / "live-soak", ignore_errors=True)
    shutil.copytree(model_dir, serve_dir)
    store = str(work / "soak-events.db")
    server = Server("sasrec", serve_dir, 1, ["--store", store, "--admin-key", API_KEY])
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    try:
        server.wait_ready()
        res = asyncio.run(
            soak(server.url, serve_dir, store, new_dir, args.soak_seconds, args.soak_concurrency, args.seed)
        )
    finally:
        server.stop()
    from attnrec.store import SqliteStore

    left = SqliteStore(store)
    res["events_left_in_store"] = left.count()  # those after the retrain's watermark: the next retrain's
    left.close()
    moved = re.search(r"\(([\d,]+) from the store\)", res.get("retrain", {}).get("output_tail", ""))
    res["events_moved_into_the_model"] = int(moved.group(1).replace(",", "")) if moved else None
    meta = json.loads((model_dir / "config.json").read_text())
    res.update(
        {
            "model": f"sasrec on ml-latest-small ({meta['n_users']:,} users, {meta['n_items']:,} items), "
            f"{json.dumps(meta['model_config'])}",
            "store": "sqlite",
            "concurrency": args.soak_concurrency,
            "loadavg_at_start": load,
            "loadavg_at_end": " ".join(f"{x:.1f}" for x in os.getloadavg()),
        }
    )
    retrain, reload = res.get("retrain", {}), res.get("reload", {})
    res["claims"] = {
        "zero_failed_requests": res["failed"] == 0,
        "retrain_and_its_reload_ok": retrain.get("returncode") == 0
        and "reloaded" in retrain.get("output_tail", ""),
        "hot_reload_ok": reload.get("status") == 200,
        "every_acknowledged_event_kept": res["events_moved_into_the_model"] is not None
        and res["events_moved_into_the_model"] + res["events_left_in_store"] == res["events_acknowledged"],
    }
    return res


# -- the report ------------------------------------------------------------------------------------
def ran(env: dict[str, Any] | None) -> str:
    """When and at which commit a section was run, with the load average at its start."""
    if not env:
        return ""
    return f"Run on {env['date']} at commit `{env['git_sha'][:10]}`, load average at start {env['loadavg']}."


def markdown(report: dict[str, Any]) -> str:
    env = report["environment"]
    lines = [
        "# Load with live histories",
        "",
        f"Generated by `benchmarks/live_load.py` (protocol in its docstring); {env['cpus']} CPU cores, "
        f"python {env['python']}, torch {env['torch']}. "
        + (
            "Server, client, redis-server and the retrain all pinned to one core (`taskset -c 1`); the other "
            "core ran other jobs."
            if (report.get("load") or {}).get("server_cpu") is None
            else "The server pinned alone to one core, the client and redis-server to the other (see below)."
        ),
    ]
    if report.get("load"):
        ld = report["load"]
        lines += [
            "",
            f"## recommend with histories read from the store ({ld['model']})",
            "",
            f"{ld['users']:,} known users, {ld['events']} stored events each (sent through "
            "`POST /v1/events`), "
            f"{ld['requests']:,} `POST /v1/recommend` requests per row for those users (k=10). Target: p99 "
            f"under 50 ms at concurrency 32. {ran(ld.get('environment'))}"
            + (
                f" This run: the server alone on CPU {ld['server_cpu']}, the client and redis-server on "
                f"CPU(s) {', '.join(map(str, ld['environment']['affinity']))}."
                if ld.get("server_cpu") is not None
                else ""
            ),
            "",
            "| store | conc. | p50 ms | p95 ms | p99 ms | req/s | errors | server CPU ms/req | load avg |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for setup in ld["setups"]:
            for r in setup["rows"]:
                lines.append(
                    f"| {setup['store']} | {r['concurrency']} | {r['p50_ms']:.1f} | {r['p95_ms']:.1f} | "
                    f"{r['p99_ms']:.1f} | {r['rps']:.0f} | {r['errors']} | "
                    f"{r['server_cpu_ms_per_request']:.2f} | {r['loadavg_1min']:.1f} |"
                )
        lines += [
            "",
            "Events in through HTTP before the rows (batches of 1,000; the ingestion benchmark is "
            "`store_ingest.md`) and the seen-item check:",
            "",
        ]
        for setup in ld["setups"]:
            if "ingest" in setup:
                i, c = setup["ingest"], setup["live_check"]
                lines.append(
                    f"- {setup['store']}: {i['accepted']:,} events in {i['seconds']:.1f} s "
                    f"({i['accepted'] / i['seconds']:,.0f} events/s); {c['stored_items_in_answers']} stored "
                    f"items in the answers of {c['users']} users"
                )
    if report.get("soak"):
        s = report["soak"]
        c = s["claims"]
        rt, rl = s.get("retrain", {}), s.get("reload", {})
        lines += [
            "",
            "## Soak: ingest and recommend across a retrain and a hot reload",
            "",
            f"{s['seconds']:.0f} s, {s['store']} store, recommend at concurrency {s['concurrency']} plus an "
            f"event batch (50) every 0.2 s; model: {s['model']}. Load average {s['loadavg_at_start']} at "
            f"start, {s['loadavg_at_end']} at the end. {ran(s.get('environment'))}",
            "",
            f"- zero failed requests: **{'yes' if c['zero_failed_requests'] else 'NO'}** "
            f"({s['failed']} failed)",
            f"- `attnrec retrain ... --reload`: **{'ok' if c['retrain_and_its_reload_ok'] else 'FAILED'}**, "
            f"started at {rt.get('started_at_s')} s, took {rt.get('seconds')} s",
            f"- hot reload of the new directory: **{'HTTP 200' if c['hot_reload_ok'] else 'FAILED'}** at "
            f"{rl.get('at_s')} s in {rl.get('seconds')} s",
            f"- events acknowledged: {s['events_acknowledged']:,}; every one kept: "
            f"**{'yes' if c.get('every_acknowledged_event_kept') else 'NO'}** "
            f"({s.get('events_moved_into_the_model')} moved into the retrained model's log, "
            f"{s.get('events_left_in_store')} left in the store for the next retrain)",
            f"- recommend latency: p50 {s['recommend_p50_ms']:.1f} ms, p99 {s['recommend_p99_ms']:.1f} ms, "
            f"max {s['recommend_max_ms']:.0f} ms",
            "",
            "| kind | status | answers |",
            "|---|---:|---:|",
        ]
        for key, n in s["counts"].items():
            kind, status = key.split()
            lines.append(f"| {kind} | {status} | {n:,} |")
        if s["failure_samples"]:
            lines += ["", "Failure samples:", ""] + [f"- `{x}`" for x in s["failure_samples"]]
        lines += ["", "The retrain's last lines:", "", "```", rt.get("output_tail", "").strip(), "```"]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--users", type=int, default=2000, help="known users given stored events and requested")
    ap.add_argument("--events", type=int, default=20, help="stored events per user")
    ap.add_argument("--requests", type=int, default=1000, help="requests per row")
    ap.add_argument("--levels", default="1,32")
    ap.add_argument("--stores", default="none,sqlite,redis")
    ap.add_argument("--train-seconds", type=float, default=120, help="ML-1M training, when not cached")
    ap.add_argument("--soak", action="store_true", help="run the soak (after the load rows unless --no-load)")
    ap.add_argument("--no-load", action="store_true", help="skip the load rows (keep those in the JSON)")
    ap.add_argument("--soak-seconds", type=float, default=90)
    ap.add_argument("--soak-concurrency", type=int, default=8)
    ap.add_argument("--soak-train-seconds", type=float, default=30)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--server-cpu",
        type=int,
        default=None,
        help="load rows: pin the server alone to this CPU (client and redis-server stay where this runs)",
    )
    ap.add_argument("--render", action="store_true")
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args()
    args.levels = [int(x) for x in args.levels.split(",")]
    json_path, md_path = Path(args.out + ".json"), Path(args.out + ".md")
    report: dict[str, Any] = json.loads(json_path.read_text()) if json_path.exists() else {}
    if args.render:
        md_path.write_text(markdown(report))
        return
    import torch

    env = report["environment"] = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "loadavg": " ".join(f"{x:.1f}" for x in os.getloadavg()),
        "affinity": sorted(os.sched_getaffinity(0)),
        "git_sha": git_sha(),
    }
    CACHE.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="live-load-") as tmp:
        work = Path(tmp)
        if not args.no_load:
            model_dir = train_ml1m("sasrec", args.train_seconds)
            meta = json.loads((model_dir / "config.json").read_text())
            users = random.Random(args.seed).sample(known(model_dir)[0], args.users)
            report["load"] = {
                "model": f"SASRec on ML-1M, {meta['n_items']:,} items, max length "
                f"{meta['model_config']['max_len']}",
                "users": args.users,
                "events": args.events,
                "requests": args.requests,
                "server_cpu": args.server_cpu,
                "setups": [],
                "environment": env,
            }
            for kind in args.stores.split(","):
                sub = work / kind
                sub.mkdir()
                if kind == "none":
                    report["load"]["setups"].append(load_rows(model_dir, None, users, args, sub))
                else:
                    with store_spec(kind, sub) as spec:
                        report["load"]["setups"].append(load_rows(model_dir, spec, users, args, sub))
                json_path.write_text(json.dumps(report, indent=2) + "\n")
                md_path.write_text(markdown(report))
        if args.soak:
            report["soak"] = run_soak(args, work) | {"environment": env}
            json_path.write_text(json.dumps(report, indent=2) + "\n")
            md_path.write_text(markdown(report))
    print(md_path.read_text())


if __name__ == "__main__":
    main()
