"""Protocol features around the messages, on one broker: what works, and strict expected failures
for what the broker does not serve yet.

* Pattern subscription: `subscribe(re.compile(...))` over two matching topics (and one that does
  not match) gets the messages of both; the client asks GET_TOPICS_OF_NAMESPACE.
* Failover: of two consumers one gets everything; when it closes, the other gets its unacked
  messages in order.
* Expected failures, each naming the missing feature. Each must fail the way described; one that
  passes fails the script with "remove the marker" (the broker has the feature now):
  - access modes: a second `ProducerAccessMode.Exclusive` producer is accepted.
"""

import re

import pulsar

import harness as h


def expect_failure(feature, scenario, xfails):
    """Runs `scenario()`, which returns None when the feature works and raises when it does not
    (or returns a string saying what failed). A pass fails the script."""
    try:
        what = scenario()
    except Exception as e:  # noqa: BLE001 - the feature's failure, whatever its type
        what = f"{type(e).__name__}: {e}"
    if what is None:
        raise h.ScenarioFailure(
            f"expected failure '{feature}' did not happen: the broker serves it now; remove the marker"
        )
    print(f"XFAIL({feature}): {what}", flush=True)
    xfails.append(feature)


def main():
    xfails = []
    with h.Broker("broker") as b:
        cl = h.client(b.service_url)

        stem = h.unique_topic("pattern")
        for suffix in ("-a", "-b", "other"):
            p = cl.create_producer(stem + suffix, batching_enabled=False)
            p.send(suffix.encode())
            p.close()
        c = cl.subscribe(
            re.compile(re.escape(stem) + "-.*"),
            "pat",
            consumer_type=pulsar.ConsumerType.Shared,
            initial_position=pulsar.InitialPosition.Earliest,
        )
        pattern_got = sorted(m.data().decode() for m in h.receive_n(c, 2, deadline_s=8, quiet_ms=500))
        h.check(pattern_got == ["-a", "-b"], f"pattern consumer got {pattern_got}, expected ['-a', '-b']")
        c.close()

        # Failover: one consumer (the broker's pick) is active and gets all 10, the other none.
        # When the active one closes with 5 unacked, the other gets those 5, in order.
        t = h.unique_topic("failover")
        fo = [
            cl.subscribe(
                t,
                "fo",
                consumer_type=pulsar.ConsumerType.Failover,
                consumer_name=name,
                initial_position=pulsar.InitialPosition.Earliest,
            )
            for name in ("a", "z")
        ]
        p = cl.create_producer(t, batching_enabled=False)
        for i in range(10):
            p.send(f"m{i}".encode())
        got = [h.drain(c, 500, deadline_s=5) for c in fo]
        h.check(
            sorted(len(g) for g in got) == [0, 10],
            f"Failover: the consumers got {len(got[0])} and {len(got[1])}; expected all 10 on one",
        )
        i = 0 if got[0] else 1
        active, standby, got_active = fo[i], fo[1 - i], got[i]
        for m in got_active[:5]:
            active.acknowledge(m)
        active.close()
        rest = [m.data().decode() for m in h.receive_n(standby, 5, deadline_s=8, quiet_ms=300)]
        want = [f"m{i}" for i in range(5, 10)]
        h.check(rest == want, f"Failover: after the active consumer closed the standby got {rest}, expected {want}")
        standby.close()
        p.close()

        def access_modes():
            t = h.unique_topic("exclusive")
            first = cl.create_producer(t, access_mode=pulsar.ProducerAccessMode.Exclusive)
            try:
                second = cl.create_producer(t, access_mode=pulsar.ProducerAccessMode.Exclusive)
            except pulsar.ProducerFenced:
                return None
            except pulsar.ProducerBusy:
                return None
            finally:
                first.close()
            second.close()
            return "a second Exclusive producer was accepted while the first was connected"

        expect_failure("access modes", access_modes, xfails)
        cl.close()
    return (
        f"protocol features: pattern subscription got {len(pattern_got)} of 2; Failover took over with {len(rest)} of 5; "
        f"expected failures: {', '.join(xfails)}"
    )


if __name__ == "__main__":
    h.run(main)
