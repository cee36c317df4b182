package org.interop.harness;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.io.UncheckedIOException;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.List;

/**
 * A byte-for-byte TCP relay in front of the broker's admin port that keeps every HTTP exchange
 * (the request as the tool sent it, the response as the broker wrote it). The tools under test
 * talk to {@link #url()}; nothing is parsed or changed on the way, so a refusal or a wrong answer
 * can be reported with the exact request and response ({@link #since(int)}), and all of them are
 * appended to {@code <name>.http.log} in the log dir.
 *
 * <p>The broker answers one request per connection ({@code Connection: close}), so one accepted
 * connection is one exchange. Each relay thread ends when either side closes (bounded: sockets
 * have a 30 s read timeout).
 */
public final class HttpRecorder implements AutoCloseable {
    private static final int KEEP_BYTES = 64 * 1024;

    /** One request and its response, as text (bodies cut at 64 KiB). */
    public record Exchange(int seq, String request, String response) {
        /** The request line, e.g. {@code PUT /admin/v2/tenants/t HTTP/1.1}. */
        public String requestLine() {
            int i = request.indexOf("\r\n");
            return i < 0 ? request : request.substring(0, i);
        }

        /** The status code of the response, -1 if none. */
        public int status() {
            String[] f = response.split(" ", 3);
            try {
                return f.length >= 2 ? Integer.parseInt(f[1]) : -1;
            } catch (NumberFormatException e) {
                return -1;
            }
        }

        /** Method, path, request body; status and response body; one line each. */
        public String brief() {
            return requestLine().replace(" HTTP/1.1", "") + body(request, 300) + " -> " + statusLine(response)
                    + body(response, 300);
        }

        private static String statusLine(String msg) {
            int i = msg.indexOf("\r\n");
            return (i < 0 ? msg : msg.substring(0, i)).replace("HTTP/1.1 ", "");
        }

        private static String body(String msg, int max) {
            int i = msg.indexOf("\r\n\r\n");
            if (i < 0 || i + 4 >= msg.length()) {
                return "";
            }
            String b = msg.substring(i + 4).replaceAll("\\s+", " ").trim();
            return " " + (b.length() > max ? b.substring(0, max) + "…" : b);
        }
    }

    private final String name;
    private final InetSocketAddress target;
    private final ServerSocket server;
    private final Thread acceptor;
    private final List<Exchange> exchanges = new ArrayList<>();
    private final Path log;
    private final java.util.concurrent.atomic.AtomicInteger inFlight = new java.util.concurrent.atomic.AtomicInteger();
    private volatile boolean closed;

    /** Relays 127.0.0.1:(free port) to {@code adminUrl} ({@code http://127.0.0.1:PORT}). */
    public HttpRecorder(String name, String adminUrl) {
        this.name = name;
        URI u = URI.create(adminUrl);
        this.target = new InetSocketAddress(u.getHost(), u.getPort());
        this.log = Env.logDir().resolve(name + ".http.log");
        try {
            server = new ServerSocket(0, 50, InetAddress.getByName("127.0.0.1"));
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
        acceptor = new Thread(this::acceptLoop, "http-recorder-" + name);
        acceptor.setDaemon(true);
        acceptor.start();
    }

    /** What the tools are given as the admin service URL. */
    public String url() {
        return "http://127.0.0.1:" + server.getLocalPort();
    }

    /** How many exchanges have completed so far (a mark for {@link #since(int)}). */
    public synchronized int mark() {
        return exchanges.size();
    }

    /** The exchanges completed since {@code mark}. */
    public synchronized List<Exchange> since(int mark) {
        return new ArrayList<>(exchanges.subList(Math.min(mark, exchanges.size()), exchanges.size()));
    }

    /**
     * The exchanges since {@code mark}, one {@link Exchange#brief()} a line (after waiting, at
     * most 1 s, for the relays still running to finish).
     */
    public String describe(int mark) {
        return describe(mark, null);
    }

    /**
     * As {@link #describe(int)}, only the exchanges whose request has a {@code User-Agent} header
     * starting with {@code userAgent} (all if null).
     */
    public String describe(int mark, String userAgent) {
        Check.Deadline d = new Check.Deadline(1);
        while (inFlight.get() > 0 && !d.expired()) {
            Check.sleepMs(5);
        }
        StringBuilder b = new StringBuilder();
        for (Exchange e : since(mark)) {
            if (userAgent != null && !e.request().toLowerCase(java.util.Locale.ROOT)
                    .contains("\r\nuser-agent: " + userAgent.toLowerCase(java.util.Locale.ROOT))) {
                continue;
            }
            b.append("\n    HTTP ").append(e.brief());
        }
        return b.toString();
    }

    private void acceptLoop() {
        int seq = 0;
        while (!closed) {
            Socket client;
            try {
                client = server.accept();
            } catch (IOException e) {
                return; // closed
            }
            int s = ++seq;
            inFlight.incrementAndGet();
            Thread t = new Thread(() -> relay(s, client), "http-relay-" + name + "-" + s);
            t.setDaemon(true);
            t.start();
        }
    }

    private void relay(int seq, Socket client) {
        CappedBuffer req = new CappedBuffer();
        CappedBuffer resp = new CappedBuffer();
        try (client; Socket up = new Socket()) {
            client.setSoTimeout(30_000);
            up.connect(target, 5_000);
            up.setSoTimeout(30_000);
            Thread upstream = new Thread(() -> pump(client, up, req), "http-relay-up-" + seq);
            upstream.setDaemon(true);
            upstream.start();
            pump(up, client, resp);
            // The broker read the whole request before it answered; the client may keep its
            // side open: closing both sockets (below) ends the other pump.
            upstream.join(500);
        } catch (IOException e) {
            resp.note("(relay failed: " + e + ")");
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        Exchange ex = new Exchange(seq, req.text(), resp.text());
        synchronized (this) {
            exchanges.add(ex);
        }
        inFlight.decrementAndGet();
        try {
            Files.writeString(log, "=== #" + seq + "\n" + ex.request() + "\n--- response\n" + ex.response() + "\n",
                    StandardCharsets.UTF_8, StandardOpenOption.CREATE, StandardOpenOption.APPEND);
        } catch (IOException ignored) {
            // the exchange is still in memory
        }
    }

    /** Copies {@code from} to {@code to} until EOF, keeping a copy; then half-closes {@code to}. */
    private static void pump(Socket from, Socket to, CappedBuffer copy) {
        byte[] buf = new byte[8192];
        try {
            InputStream in = from.getInputStream();
            OutputStream out = to.getOutputStream();
            int n;
            while ((n = in.read(buf)) >= 0) {
                copy.add(buf, n);
                out.write(buf, 0, n);
                out.flush();
            }
        } catch (IOException e) {
            // either side closed
        }
        try {
            to.shutdownOutput();
        } catch (IOException ignored) {
            // already closed
        }
    }

    /** The first 64 KiB of a byte stream. */
    private static final class CappedBuffer {
        private final java.io.ByteArrayOutputStream bytes = new java.io.ByteArrayOutputStream();
        private String note = "";

        synchronized void add(byte[] b, int n) {
            int room = KEEP_BYTES - bytes.size();
            if (room > 0) {
                bytes.write(b, 0, Math.min(room, n));
            }
        }

        synchronized void note(String s) {
            note = s;
        }

        synchronized String text() {
            return bytes.toString(StandardCharsets.UTF_8) + note;
        }
    }

    @Override
    public void close() {
        closed = true;
        try {
            server.close();
        } catch (IOException ignored) {
            // closing
        }
    }
}
