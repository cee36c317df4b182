package org.interop.harness;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicLong;

/** What a scenario tells its summary line: how many messages it moved, and notes. */
public final class Report {
    private final AtomicLong messages = new AtomicLong();
    private final List<String> notes = new ArrayList<>();

    public void messages(long n) {
        messages.addAndGet(n);
    }

    public long messages() {
        return messages.get();
    }

    public synchronized void note(String s) {
        notes.add(s);
    }

    public synchronized String notes() {
        return String.join("; ", notes);
    }
}
