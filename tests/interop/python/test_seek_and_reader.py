"""Seek and Reader: the two ways a stock client names a start position.

* Shared consumer: 10 messages received and acked, then `seek(MessageId.earliest)`: all 10 come
  back (the broker closes the consumer, the client subscribes again); then `seek(id of #6)`:
  #6..#9 come back.
* Readers (non-durable subscriptions): from `earliest` reads all 10 in order; from #4 exclusive
  reads #5..#9; from #4 inclusive starts at #4; from `latest` reads only a message published
  after it was created.
* A reader from `latest` says `has_message_available()` false, then `seek(publish time of #5)`
  reads #5..#9 (the reader's non-durable subscription survives the broker-side close that a
  seek does, with the position the seek set), and `has_message_available()` turns true when a
  message is published after that.
"""

import time

import pulsar

import harness as h

N = 10


def read_all(reader, quiet_ms=700, limit=50):
    out = []
    d = h.Deadline(8)
    while len(out) < limit and not d.expired():
        try:
            out.append(reader.read_next(d.left_ms(quiet_ms)).data().decode())
        except pulsar.Timeout:
            break
    return out


def names(msgs):
    return [m.data().decode() for m in msgs]


def main():
    with h.Broker("broker") as b:
        cl = h.client(b.service_url)
        topic = h.unique_topic("seek")
        cons = cl.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
        producer = cl.create_producer(topic, batching_enabled=False)
        ids = []
        for i in range(N):
            time.sleep(0.002)  # publish times strictly apart, so #5's time names #5 alone
            ids.append(producer.send(f"m{i}".encode()))
        want = [f"m{i}" for i in range(N)]
        got = h.receive_n(cons, N)
        h.check(names(got) == want, f"first pass {names(got)}")
        publish_times = [m.publish_timestamp() for m in got]
        for m in got:
            cons.acknowledge(m)
        time.sleep(0.3)  # the grouped acks reach the broker

        cons.seek(pulsar.MessageId.earliest)
        again = h.receive_n(cons, N, quiet_ms=500)
        h.check(sorted(names(again)) == sorted(want), f"after seek(earliest): {names(again)}")
        for m in again:
            cons.acknowledge(m)
        time.sleep(0.3)
        cons.seek(ids[6])
        tail = h.receive_n(cons, 3, quiet_ms=500)
        h.check(sorted(names(tail)) == want[7:], f"after seek(#6): {names(tail)} (the client drops #6 itself: its start is exclusive)")
        for m in tail:
            cons.acknowledge(m)
        cons.close()

        r = cl.create_reader(topic, pulsar.MessageId.earliest)
        all_ = read_all(r)
        h.check(all_ == want, f"reader from earliest: {all_}")
        r.close()
        r = cl.create_reader(topic, ids[4])
        excl = read_all(r)
        h.check(excl == want[5:], f"reader from #4 (exclusive): {excl}")
        r.close()
        r = cl.create_reader(topic, ids[4], start_message_id_inclusive=True)
        incl = read_all(r)
        h.check(incl == want[4:], f"reader from #4 (inclusive): {incl}")
        r.close()
        r = cl.create_reader(topic, pulsar.MessageId.latest)
        producer.send(b"late")
        latest = read_all(r)
        h.check(latest == ["late"], f"reader from latest: {latest}")
        r.close()

        r = cl.create_reader(topic, pulsar.MessageId.latest)
        h.check(not r.has_message_available(), "reader from latest: a message available at once")
        r.seek(publish_times[5])
        by_time = read_all(r)
        h.check(by_time == want[5:] + ["late"], f"reader after seek(publish time of #5): {by_time}")
        h.check(not r.has_message_available(), "reader at the end: a message still available")
        producer.send(b"later")
        h.wait_until(r.has_message_available, 5, "has_message_available after a new message")
        r.close()
        producer.close()
        cl.close()
    return (
        f"seek/reader: {N} sent; seek(earliest) redelivered {len(again)}, seek(#6) {len(tail)}; "
        f"readers: earliest {len(all_)}, #4 exclusive {len(excl)}, #4 inclusive {len(incl)}, latest {len(latest)}, "
        f"seek(time of #5) {len(by_time)}"
    )


if __name__ == "__main__":
    h.run(main)
