package org.interop.harness;

import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Proxy;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.MessageId;
import org.apache.pulsar.client.api.MessageIdAdv;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.PulsarClientException;
import org.apache.pulsar.client.api.Reader;

/** The stock Java client with short timeouts, and bounded receive helpers. */
public final class Clients {
    private Clients() {}

    /**
     * operationTimeout 5 s, connectionTimeout 2 s, no stats timer. Its {@code close()} closes the
     * producers and consumers and leaves the event loop's graceful shutdown (Netty's 2 s quiet
     * period) to the client's own shutdown thread instead of waiting for it; close producers and
     * consumers yourself first where it matters.
     */
    public static PulsarClient client(String serviceUrl) throws PulsarClientException {
        PulsarClient real = build(serviceUrl);
        return (PulsarClient) Proxy.newProxyInstance(PulsarClient.class.getClassLoader(),
                new Class<?>[] {PulsarClient.class}, (proxy, method, args) -> {
                    if (method.getName().equals("close") && method.getParameterCount() == 0) {
                        CompletableFuture<Void> f = real.closeAsync();
                        try {
                            f.get(100, TimeUnit.MILLISECONDS);
                        } catch (TimeoutException e) {
                            // the event loop finishes shutting down by itself
                        }
                        return null;
                    }
                    try {
                        return method.invoke(real, args);
                    } catch (InvocationTargetException e) {
                        throw e.getCause();
                    }
                });
    }

    private static PulsarClient build(String serviceUrl) throws PulsarClientException {
        return PulsarClient.builder()
                .serviceUrl(serviceUrl)
                .operationTimeout(5, TimeUnit.SECONDS)
                .connectionTimeout(2, TimeUnit.SECONDS)
                .lookupTimeout(5, TimeUnit.SECONDS)
                .statsInterval(0, TimeUnit.SECONDS)
                .ioThreads(1)
                .listenerThreads(1)
                .build();
    }

    /** {@code persistent://public/default/<stem>-<random>}. */
    public static String topic(String stem) {
        return "persistent://public/default/" + stem + "-" + Long.toString(System.currentTimeMillis() % 100_000_000L, 36)
                + Integer.toString(ThreadLocalRandom.current().nextInt(1 << 20), 36);
    }

    public static String text(Message<byte[]> m) {
        return new String(m.getValue(), StandardCharsets.UTF_8);
    }

    public static byte[] bytes(String s) {
        return s.getBytes(StandardCharsets.UTF_8);
    }

    /** "ledger:entry:batchIndex" of a message id. */
    public static String id(MessageId id) {
        if (id instanceof MessageIdAdv a) {
            return a.getLedgerId() + ":" + a.getEntryId() + ":" + a.getBatchIndex();
        }
        return id.toString();
    }

    public static long ledger(MessageId id) {
        return ((MessageIdAdv) id).getLedgerId();
    }

    public static long entry(MessageId id) {
        return ((MessageIdAdv) id).getEntryId();
    }

    public static int batchIndex(MessageId id) {
        return ((MessageIdAdv) id).getBatchIndex();
    }

    /** {@code receive(timeout)}: null on timeout. */
    public static <T> Message<T> receive(Consumer<T> c, long timeoutMs) throws PulsarClientException {
        return c.receive((int) Math.max(1, timeoutMs), TimeUnit.MILLISECONDS);
    }

    /** Receives until nothing arrives for {@code quietMs} (or {@code deadlineS} passed); unacked. */
    public static <T> List<Message<T>> drain(Consumer<T> c, int quietMs, double deadlineS) throws PulsarClientException {
        List<Message<T>> got = new ArrayList<>();
        Check.Deadline d = new Check.Deadline(deadlineS);
        while (!d.expired() && got.size() < 100_000) {
            Message<T> m = receive(c, d.leftMs(quietMs));
            if (m == null) {
                break;
            }
            got.add(m);
        }
        return got;
    }

    /**
     * Receives until {@code n} messages arrived (or {@code deadlineS} passed), then keeps receiving
     * until nothing more comes for {@code quietMs}, so extras and duplicates show. Unacked.
     */
    public static <T> List<Message<T>> receiveN(Consumer<T> c, int n, double deadlineS, int quietMs)
            throws PulsarClientException {
        List<Message<T>> got = new ArrayList<>();
        Check.Deadline d = new Check.Deadline(deadlineS);
        while (got.size() < n && !d.expired()) {
            Message<T> m = receive(c, d.leftMs(500));
            if (m != null) {
                got.add(m);
            }
        }
        got.addAll(drain(c, quietMs, 5));
        return got;
    }

    /** Reads until nothing arrives for {@code quietMs}; the payloads as text. */
    public static List<String> readAll(Reader<byte[]> r, int quietMs, int limit) throws PulsarClientException {
        List<String> out = new ArrayList<>();
        Check.Deadline d = new Check.Deadline(8);
        while (out.size() < limit && !d.expired()) {
            Message<byte[]> m = r.readNext(d.leftMs(quietMs), TimeUnit.MILLISECONDS);
            if (m == null) {
                break;
            }
            out.add(text(m));
        }
        return out;
    }

    public static List<String> texts(List<Message<byte[]>> ms) {
        List<String> out = new ArrayList<>();
        for (Message<byte[]> m : ms) {
            out.add(text(m));
        }
        return out;
    }

    /**
     * Sends {@code text} on {@code p} until a send fails (they may succeed, or wait, while the
     * client reconnects after the broker closed the producer); returns that failure's cause,
     * or null when none failed within {@code withinMs}.
     */
    public static Throwable firstSendFailure(Producer<byte[]> p, String text, long withinMs) throws InterruptedException {
        long until = System.currentTimeMillis() + withinMs;
        while (System.currentTimeMillis() < until) {
            try {
                p.sendAsync(bytes(text)).get(2, TimeUnit.SECONDS);
                Thread.sleep(100);
            } catch (ExecutionException e) {
                return e.getCause();
            } catch (TimeoutException e) {
                // still reconnecting
            }
        }
        return null;
    }
}
