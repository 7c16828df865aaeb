"""The floor arithmetic of ``retrieve_server.py``: the best any ``/retrieve`` server could do
on this machine, from the costs the same run measured, so a goal not met can be read against
what was reachable. The formulas and figures: docs/performance.md, "How the floors are computed".
"""

from __future__ import annotations

NO_ENCODER = "no encoder (HTTP path only)"  # the server variant that measures the HTTP path alone


def floor_report(
    enc: dict, rows: dict, encoders: list[str], chroma: dict, best_of: dict, overall: str, cores: int
) -> dict:
    """1 client: the encoder's batch-1 call, the batch-1 Chroma query and the no-encoder server's
    round trip, one after the other. Throughput: the cores over what every query costs at least."""
    store_enc = next(iter(encoders))
    http = rows[NO_ENCODER]
    batch1 = enc[store_enc][1]["ms"]
    one_client = batch1 + chroma[1] + http["1c_1q"]["p50_ms"]
    best = enc[overall][best_of[overall]]
    out = {"1c_p50_floor_ms": one_client, "1c_p50_floor_over_batch1": one_client / batch1}
    print(
        f"1-client floor: batch-1 encode {batch1:.1f} + Chroma query {chroma[1]:.2f} + HTTP round trip "
        f"{http['1c_1q']['p50_ms']:.2f} ms (no-encoder server) = {one_client:.1f} ms = "
        f"{one_client / batch1:.2f}x the batch-1 call (goal <= 1.15)"
    )
    for ln in ("8c_1q", "32c_1q"):
        client = rows["batched"][ln]["client_cpu_ms_per_request"]
        per_query = best["cpu_ms_per_query"] + http[ln]["server_cpu_ms_per_query"] + chroma[8] / 8 + client
        ceiling = 1000 * cores / per_query
        out[f"{ln}_floor_queries_per_s"] = ceiling
        out[f"{ln}_floor_over_best"] = ceiling / best["queries_per_s"]
        little = (
            f"; mean latency at 8 clients >= {8000 / ceiling:.0f} ms (Little's law)" if ln == "8c_1q" else ""
        )
        print(
            f"throughput floor at {ln}: {cores} cores / ({best['cpu_ms_per_query']:.2f} encoder + "
            f"{http[ln]['server_cpu_ms_per_query']:.2f} HTTP + {chroma[8] / 8:.2f} Chroma + {client:.2f} "
            f"clients ms CPU per query) = {ceiling:.0f} queries/s = {ceiling / best['queries_per_s']:.2f}x "
            f"the best bare encoder ({overall}){little}"
        )
    out.update(eight_client_floor(enc, rows, chroma, best, overall, cores))
    return out


def eight_client_floor(enc: dict, rows: dict, chroma: dict, best: dict, overall: str, cores: int) -> dict:
    """The 8-client floor once batch size is counted (8 queries in flight): the better of one
    batch of 8 at a time (the encoder idles during its Chroma query and answers) and batches of
    at most 4 kept in flight (the bare batch-4 rate, the other CPU on the same cores)."""
    http = rows[NO_ENCODER]["8c_1q"]
    client = rows["batched"]["8c_1q"]["client_cpu_ms_per_request"]
    e8, e4 = enc[overall][8], enc[overall][4]
    one_batch = 8000 / (e8["ms"] + chroma[8] + http["p50_ms"])
    other_cpu = chroma[4] / 4 + http["server_cpu_ms_per_query"] + client
    pipelined = 1000 / (1000 / e4["queries_per_s"] + other_cpu / cores)
    floor = max(one_batch, pipelined)
    print(
        f"8-client floor with batch size counted ({overall}): one batch of 8 at a time 8 / "
        f"({e8['ms']:.1f} encode + {chroma[8]:.2f} Chroma + {http['p50_ms']:.2f} HTTP ms) = {one_batch:.0f} q/s; "
        f"batches of 4 kept in flight: bare batch 4 {e4['queries_per_s']:.0f} q/s plus {other_cpu:.2f} ms CPU "
        f"per query over {cores} cores = {pipelined:.0f} q/s; floor {floor:.0f} q/s = "
        f"{floor / best['queries_per_s']:.2f}x the best bare encoder (goal >= 0.8)"
    )
    return {
        "8c_one_batch_floor_queries_per_s": one_batch,
        "8c_pipelined_floor_queries_per_s": pipelined,
        "8c_batch_floor_over_best": floor / best["queries_per_s"],
    }
