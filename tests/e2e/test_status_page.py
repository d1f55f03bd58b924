"""The router's status page in headless Chromium (Debian's `chromium`): it
loads with no console error and no error of its own, every figure it shows
equals the router's JSON and the instances' own /metrics read beside it, and
a screenshot is taken (its path printed).

The instances' totals move by themselves: the router's latency probe is a real
one-token completion every second, so the page's finished requests and
generated tokens must lie between the direct reads taken just before and just
after it rendered; every other figure must equal them. (A probe running at the
moment of a read shows as one request running: the comparison is tried up to
three times, and a figure the page shows wrongly differs every time.) The
timeouts only bound the test against a hang."""

import decimal
import html.parser
import json
import re
import subprocess
import time
import urllib.request

from router_process import ADMIN, Router
from server_process import STORIES

CHROMIUM = ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr", "--v=0",
            "--window-size=1300,1400", "--virtual-time-budget=3000"]


class DataKeys(html.parser.HTMLParser):
    """The text of every element with a data-key, and the body's attributes."""

    def __init__(self):
        super().__init__()
        self.values, self.body, self.errors, self._open = {}, {}, "", []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "body":
            self.body = attrs
        self._open.append((attrs.get("data-key") or ("#errors" if attrs.get("id") == "errors" else None), ""))

    def handle_endtag(self, tag):
        if not self._open:
            return
        key, text = self._open.pop()
        if key == "#errors":
            self.errors = text
        elif key:
            self.values[key] = text
        if self._open:  # the text is also its parent's
            parent_key, parent_text = self._open[-1]
            self._open[-1] = (parent_key, parent_text + text)

    def handle_data(self, data):
        if self._open:
            key, text = self._open[-1]
            self._open[-1] = (key, text + data)


def get_json(url, headers=ADMIN):
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10) as r:
        return json.loads(r.read())


def instance_metric(text, name):
    """The sum of a metric's series in Prometheus text."""
    return sum(float(m.group(1)) for m in re.finditer(rf"^{re.escape(name)}(?:{{[^}}]*}})? (\S+)$", text, re.M))


def js_fixed(v, digits):
    """x.toFixed(digits) as the page's script writes it: the exact binary value, halves away from zero."""
    return str(decimal.Decimal(v).quantize(decimal.Decimal(1).scaleb(-digits), rounding=decimal.ROUND_HALF_UP))


def js_number(v):
    """A number as the page's String(v) writes it."""
    return str(int(v)) if float(v).is_integer() else repr(float(v))


def render(router, key, extra):
    url = router.base + "/" + (f"#key={key}" if key else "")
    result = subprocess.run(CHROMIUM + extra + [url], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    console = [line for line in result.stderr.splitlines() if "CONSOLE" in line]
    return result.stdout, console


def agrees(key, shown, before, after):
    if key.endswith(("/requests_finished", "/generation_tokens")):  # totals: the probes add to them
        return shown is not None and float(before) <= float(shown) <= float(after)
    return shown == before == after


def expected_figures(router):
    """What the page should show now: the router's JSON, with each instance's totals and load read from it directly."""
    instances = get_json(router.base + "/admin/instances")["instances"]
    canary = get_json(router.base + "/admin/canary")
    want = {"canary/state": canary["state"], "canary/stage_percent": str(canary["stage_percent"]),
            "canary/greedy_pairs": str(canary["stage"]["figures"]["greedy_pairs"]),
            "canary/exact_match_percent": js_fixed(100 * canary["stage"]["figures"]["exact_match"], 1) + "%"}
    figures = canary["stage"]["figures"]
    for side in ("stable", "canary"):
        want[f"canary/{side}/requests"] = str(figures[side]["requests"])
        want[f"canary/{side}/errors"] = str(figures[side]["errors"])
        for latency in ("ttft_p99_ms", "tpot_p99_ms"):
            want[f"canary/{side}/{latency}"] = js_fixed(figures[side][latency], 1) + " ms"
    for latency in ("ttft_p99_ms", "tpot_p99_ms"):
        delta = 100 * (figures["canary"][latency] / figures["stable"][latency] - 1)
        want[f"canary/canary/{latency}_delta"] = ("+" if delta >= 0 else "") + js_fixed(delta, 1) + "%"
    for i in instances:
        with urllib.request.urlopen(i["url"] + "/metrics", timeout=10) as r:
            text = r.read().decode()
        k = f"instance/{i['id']}/"
        want.update({k + "version": i["version"], k + "state": i["state"], k + "outstanding": str(i["outstanding"]),
                     k + "requests_finished": js_number(instance_metric(text, "dsinfer:request_success_total")),
                     k + "generation_tokens": js_number(instance_metric(text, "dsinfer:generation_tokens_total")),
                     k + "running": js_number(instance_metric(text, "dsinfer:num_requests_running")),
                     k + "waiting": js_number(instance_metric(text, "dsinfer:num_requests_waiting")),
                     k + "kv_pages_cached": js_number(instance_metric(text, "dsinfer:kv_pages_cached")),
                     k + "kv_usage_percent": js_fixed(100 * instance_metric(text, "dsinfer:kv_cache_usage_perc"), 1) + "%"})
    return want


def test_the_status_page_shows_what_the_router_and_instances_say(tmp_path):
    instances = [{"id": id, "version": version, "model": STORIES, "args": ["--ctx-size", "256"]}
                 for id, version in (("stable", "v1"), ("canary", "v2"))]
    release = {"canary": {"stable": "v1", "canary": "v2", "min_samples": 1000, "shadow_fraction": 1.0},
               "audit": {"path": str(tmp_path / "audit.db")}}
    router = Router(tmp_path, instances, extra=release)
    try:
        for i in range(12):
            body = {"prompt": f"Once upon a time {i}", "max_tokens": 16, "temperature": 0, "stream": i % 3 == 0}
            request = urllib.request.Request(router.base + "/v1/completions", data=json.dumps(body).encode(), method="POST",
                                             headers={"X-Canary": "0"})  # stable, each copied to the canary
            with urllib.request.urlopen(request, timeout=60) as r:
                r.read()
        time.sleep(1.0)  # the shadow copies finish, and each instance is scraped again

        # Without the key the page says what is missing, and shows nothing.
        dom, console = render(router, None, ["--dump-dom"])
        page = DataKeys()
        page.feed(dom)
        assert "401" in page.errors and "admin key" in page.errors, page.errors
        assert page.body.get("data-loaded") is None

        for attempt in range(3):
            before = expected_figures(router)
            dom, console = render(router, "admin-key-1", ["--dump-dom"])
            after = expected_figures(router)
            page = DataKeys()
            page.feed(dom)
            assert page.body.get("data-loaded") == "1", dom[:2000]
            assert page.errors == "" and console == [], (page.errors, console)
            shown = {k: page.values.get(k) for k in before}
            wrong = {k: (shown[k], before[k], after[k]) for k in before if not agrees(k, shown[k], before[k], after[k])}
            if not wrong:
                break
        assert not wrong, wrong
        assert int(shown["instance/stable/requests_finished"]) >= 12 and int(shown["instance/canary/requests_finished"]) >= 12
        assert shown["canary/stable/requests"] == "12" and shown["canary/greedy_pairs"] == "12"

        shot = tmp_path / "status_page.png"
        _, console = render(router, "admin-key-1", [f"--screenshot={shot}"])
        assert console == [], console
        assert shot.stat().st_size > 20000  # a blank page of this size is a few kilobytes
        print(f"\nstatus page screenshot: {shot} ({shot.stat().st_size} bytes, {attempt + 1} comparison(s))")
    finally:
        router.stop()
