"""Protocol features around the messages, on one broker: what works, and strict expected failures
for what the broker does not serve yet.

* Pattern subscription: `subscribe(re.compile(...))` over two matching topics (and one that does
  not match) gets the messages of both; the client asks GET_TOPICS_OF_NAMESPACE.
* Expected failures, each naming the missing feature. Each must fail the way described; one that
  passes fails the script with "remove the marker" (the broker has the feature now):
  - Failover: a Failover consumer is refused (the subscribe raises);
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
        got = sorted(m.data().decode() for m in h.receive_n(c, 2, deadline_s=8, quiet_ms=500))
        h.check(got == ["-a", "-b"], f"pattern consumer got {got}, expected ['-a', '-b']")
        c.close()

        def failover():
            t = h.unique_topic("failover")
            cl.subscribe(t, "fo", consumer_type=pulsar.ConsumerType.Failover).close()

        expect_failure("Failover", failover, xfails)

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
    return f"protocol features: pattern subscription got {len(got)} of 2; expected failures: {', '.join(xfails)}"


if __name__ == "__main__":
    h.run(main)
