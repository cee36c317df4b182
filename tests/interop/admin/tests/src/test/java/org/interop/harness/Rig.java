package org.interop.harness;

import static org.interop.harness.Check.check;

import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import org.apache.pulsar.client.admin.PulsarAdmin;
import org.apache.pulsar.client.admin.PulsarAdminException;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.PulsarClientException;

/**
 * One scenario's broker and the tools pointed at it: the broker process ({@link Broker}), the
 * {@link HttpRecorder} in front of its admin port, Pulsar's Java admin API ({@link #admin}), the
 * stock Java client ({@link #client()}) and the {@code pulsar-admin} CLI ({@link #cli()}).
 * {@link #close()} closes them in reverse order and fails if the broker did not stop cleanly.
 */
public final class Rig implements AutoCloseable {
    public final Broker broker;
    public final HttpRecorder http;
    public final PulsarAdmin admin;
    private PulsarClient client;
    private Cli cli;

    private Rig(Broker broker) {
        this.broker = broker;
        this.http = new HttpRecorder(broker.name(), broker.adminUrl());
        try {
            this.admin = PulsarAdmin.builder()
                    .serviceHttpUrl(http.url())
                    .connectionTimeout(2, TimeUnit.SECONDS)
                    .readTimeout(5, TimeUnit.SECONDS)
                    .requestTimeout(5, TimeUnit.SECONDS)
                    .build();
        } catch (PulsarClientException e) {
            throw new Check.ScenarioFailure("cannot build PulsarAdmin for " + http.url() + ": " + e);
        }
    }

    /** A fresh in-memory broker ({@code flags} added) and the tools. */
    public static Rig start(String name, String... flags) {
        Broker b = Broker.start(name, flags);
        try {
            return new Rig(b);
        } catch (RuntimeException | Error e) {
            b.close();
            throw e;
        }
    }

    /** The stock Java client (built on first use): operation timeout 5 s, no stats timer. */
    public synchronized PulsarClient client() throws PulsarClientException {
        if (client == null) {
            client = PulsarClient.builder()
                    .serviceUrl(broker.serviceUrl())
                    .operationTimeout(5, TimeUnit.SECONDS)
                    .connectionTimeout(2, TimeUnit.SECONDS)
                    .lookupTimeout(5, TimeUnit.SECONDS)
                    .statsInterval(0, TimeUnit.SECONDS)
                    .ioThreads(1)
                    .listenerThreads(1)
                    .build();
        }
        return client;
    }

    /** The pulsar-admin CLI, configured with this broker's admin URL (through the recorder). */
    public synchronized Cli cli() {
        if (cli == null) {
            cli = new Cli(broker.name(), http);
        }
        return cli;
    }

    /** An admin call that must succeed. */
    public interface Call<T> {
        T call() throws Exception;
    }

    /** An admin call with no result. */
    public interface Action {
        void run() throws Exception;
    }

    /**
     * Runs an admin call that must succeed; on failure, fails with the exception and the HTTP
     * exchanges the call made (method, path, body; status, body).
     */
    public <T> T ok(String what, Call<T> c) {
        int mark = http.mark();
        try {
            return c.call();
        } catch (Exception e) {
            throw failure(what + " failed: " + describe(e) + http.describe(mark), e);
        }
    }

    /** {@link #ok(String, Call)} for a call with no result. */
    public void ok(String what, Action a) {
        ok(what, () -> {
            a.run();
            return null;
        });
    }

    /**
     * Runs an admin call that the broker must refuse with {@code type} (exactly that class of
     * {@link PulsarAdminException}), HTTP {@code status}, and a message containing
     * {@code reasonPart} (if not null). Returns the exception.
     */
    public PulsarAdminException refused(String what, Class<? extends PulsarAdminException> type, int status,
            String reasonPart, Action a) {
        int mark = http.mark();
        try {
            a.run();
        } catch (PulsarAdminException e) {
            String http = this.http.describe(mark);
            check(e.getClass() == type, what + ": expected " + type.getSimpleName() + " (HTTP " + status + "), got "
                    + describe(e) + http);
            check(e.getStatusCode() == status, what + ": expected HTTP " + status + ", got " + describe(e) + http);
            if (reasonPart != null) {
                check(e.getMessage() != null && e.getMessage().contains(reasonPart),
                        what + ": expected the message to contain `" + reasonPart + "`, got " + describe(e) + http);
            }
            return e;
        } catch (Exception e) {
            throw failure(what + ": expected " + type.getSimpleName() + ", got " + describe(e) + http.describe(mark),
                    e);
        }
        throw new Check.ScenarioFailure(what + ": expected " + type.getSimpleName() + " (HTTP " + status
                + "), but the call succeeded" + http.describe(mark));
    }

    static String describe(Throwable e) {
        String s = e.getClass().getName().replace("org.apache.pulsar.client.admin.", "") + ": " + e.getMessage();
        if (e instanceof PulsarAdminException p) {
            s += " (status " + p.getStatusCode() + ")";
        }
        return s;
    }

    private static Check.ScenarioFailure failure(String msg, Throwable cause) {
        Check.ScenarioFailure f = new Check.ScenarioFailure(msg);
        f.initCause(cause);
        return f;
    }

    /** A name no other scenario uses: {@code <stem>-<random>}. */
    public static String unique(String stem) {
        return stem + "-" + Long.toString(System.currentTimeMillis() % 100_000_000L, 36)
                + Integer.toString(ThreadLocalRandom.current().nextInt(1 << 20), 36);
    }

    @Override
    public void close() {
        try {
            if (client != null) {
                CompletableFuture<Void> f = client.closeAsync();
                try {
                    f.get(1, TimeUnit.SECONDS);
                } catch (TimeoutException e) {
                    // the event loop finishes shutting down by itself
                } catch (Exception e) {
                    // closing
                }
            }
            admin.close();
            http.close();
        } finally {
            broker.close();
        }
    }
}
