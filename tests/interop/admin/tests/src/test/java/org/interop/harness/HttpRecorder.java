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
 * <p>The broker keeps connections open (HTTP/1.1 keep-alive), so each direction of a connection is
 * cut into messages by HTTP's own framing ({@code Content-Length}, chunked, or none); an exchange is
 * recorded as soon as its response is whole (interim {@code 1xx} responses are kept with the final
 * one), and what is left when the connection ends (a request never answered, a response cut short)
 * is recorded then. Each relay thread ends when either side closes (bounded: sockets have a 30 s
 * read timeout).
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
            Thread t = new Thread(() -> relay(s, client), "http-relay-" + name + "-" + s);
            t.setDaemon(true);
            t.start();
        }
    }

    private void relay(int conn, Socket client) {
        Conn c = new Conn();
        try (client; Socket up = new Socket()) {
            client.setSoTimeout(30_000);
            up.connect(target, 5_000);
            up.setSoTimeout(30_000);
            Thread upstream = new Thread(() -> pump(client, up, c::fromClient), "http-relay-up-" + conn);
            upstream.setDaemon(true);
            upstream.start();
            pump(up, client, c::fromBroker);
            // The client may keep its side open: closing both sockets (below) ends the other pump.
            upstream.join(500);
        } catch (IOException e) {
            c.note = "(relay failed: " + e + ")";
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        c.end();
    }

    private void record(String request, String response) {
        Exchange ex;
        synchronized (this) {
            ex = new Exchange(exchanges.size() + 1, request, response);
            exchanges.add(ex);
        }
        try {
            Files.writeString(log, "=== #" + ex.seq() + "\n" + ex.request() + "\n--- response\n" + ex.response() + "\n",
                    StandardCharsets.UTF_8, StandardOpenOption.CREATE, StandardOpenOption.APPEND);
        } catch (IOException ignored) {
            // the exchange is still in memory
        }
    }

    /**
     * One relayed connection: the bytes of each direction not yet cut into an exchange. The
     * client's requests wait in {@code requests} until a response is whole; then the first whole
     * request (or all that came, if it cannot be framed) pairs with it.
     */
    private final class Conn {
        private final java.io.ByteArrayOutputStream requests = new java.io.ByteArrayOutputStream();
        private final java.io.ByteArrayOutputStream responses = new java.io.ByteArrayOutputStream();
        private final StringBuilder interim = new StringBuilder();
        private boolean busy;
        private volatile String note = "";

        synchronized void fromClient(byte[] b, int n) {
            requests.write(b, 0, n);
            setBusy(true);
        }

        synchronized void fromBroker(byte[] b, int n) {
            responses.write(b, 0, n);
            byte[] buf = responses.toByteArray();
            int at = 0;
            int len;
            while ((len = messageLength(buf, at, false)) > 0) {
                String msg = text(buf, at, len);
                at += len;
                if (msg.startsWith("HTTP/1.1 1") || msg.startsWith("HTTP/1.0 1")) {
                    interim.append(msg);
                    continue;
                }
                record(takeRequest(), interim + msg);
                interim.setLength(0);
            }
            responses.reset();
            responses.write(buf, at, buf.length - at);
            setBusy(requests.size() > 0 || responses.size() > 0);
        }

        synchronized void end() {
            if (requests.size() > 0 || responses.size() > 0 || interim.length() > 0) {
                byte[] r = responses.toByteArray();
                record(takeRequest() + (requests.size() > 0 ? requests.toString(StandardCharsets.UTF_8) : ""),
                        interim + text(r, 0, r.length) + note);
                requests.reset();
            }
            setBusy(false);
        }

        /** The first whole request waiting (all that waits if none can be framed). */
        private String takeRequest() {
            byte[] buf = requests.toByteArray();
            int len = messageLength(buf, 0, true);
            if (len < 0) {
                len = buf.length;
            }
            requests.reset();
            requests.write(buf, len, buf.length - len);
            return text(buf, 0, len);
        }

        private void setBusy(boolean b) {
            if (b != busy) {
                busy = b;
                inFlight.addAndGet(b ? 1 : -1);
            }
        }
    }

    /** At most {@link #KEEP_BYTES} of {@code len} bytes from {@code at}, as text. */
    private static String text(byte[] b, int at, int len) {
        return new String(b, at, Math.min(len, KEEP_BYTES), StandardCharsets.UTF_8);
    }

    /**
     * The length of the HTTP message starting at {@code at} once it is whole, -1 before (or
     * never: a response framed by the connection's end). A request without a length has no body;
     * so has a 1xx, 204 or 304 response.
     */
    static int messageLength(byte[] b, int at, boolean request) {
        try {
            return framedLength(b, at, request);
        } catch (NumberFormatException e) {
            return -1; // a length that is not a number: framed by the connection's end
        }
    }

    private static int framedLength(byte[] b, int at, boolean request) {
        int headEnd = find(b, at, "\r\n\r\n");
        if (headEnd < 0) {
            return -1;
        }
        int bodyAt = headEnd + 4;
        String head = new String(b, at, headEnd - at, StandardCharsets.ISO_8859_1);
        if (!request) {
            String[] status = head.split(" ", 3);
            if (status.length >= 2 && (status[1].startsWith("1") || status[1].equals("204")
                    || status[1].equals("304"))) {
                return bodyAt - at;
            }
        }
        long length = -1;
        boolean chunked = false;
        for (String line : head.split("\r\n")) {
            int colon = line.indexOf(':');
            if (colon < 0) {
                continue;
            }
            String k = line.substring(0, colon).trim().toLowerCase(java.util.Locale.ROOT);
            String v = line.substring(colon + 1).trim().toLowerCase(java.util.Locale.ROOT);
            if (k.equals("content-length")) {
                length = Long.parseLong(v);
            } else if (k.equals("transfer-encoding") && v.contains("chunked")) {
                chunked = true;
            }
        }
        if (chunked) {
            int end = chunkedEnd(b, bodyAt);
            return end < 0 ? -1 : end - at;
        }
        if (length < 0) {
            return request ? bodyAt - at : -1;
        }
        return b.length - bodyAt >= length ? (int) (bodyAt + length - at) : -1;
    }

    /** Where a chunked body starting at {@code at} ends (after its trailers), -1 if not yet. */
    private static int chunkedEnd(byte[] b, int at) {
        int pos = at;
        while (true) {
            int eol = find(b, pos, "\r\n");
            if (eol < 0) {
                return -1;
            }
            String size = new String(b, pos, eol - pos, StandardCharsets.ISO_8859_1).split(";", 2)[0].trim();
            long n = Long.parseLong(size, 16);
            pos = eol + 2;
            if (n == 0) {
                if (b.length - pos >= 2 && b[pos] == '\r' && b[pos + 1] == '\n') {
                    return pos + 2;
                }
                int end = find(b, pos, "\r\n\r\n");
                return end < 0 ? -1 : end + 4;
            }
            if (b.length - pos < n + 2) {
                return -1;
            }
            pos += (int) n + 2;
        }
    }

    private static int find(byte[] b, int from, String what) {
        byte[] w = what.getBytes(StandardCharsets.ISO_8859_1);
        outer:
        for (int i = from; i + w.length <= b.length; i++) {
            for (int j = 0; j < w.length; j++) {
                if (b[i + j] != w[j]) {
                    continue outer;
                }
            }
            return i;
        }
        return -1;
    }

    /** Copies {@code from} to {@code to} until EOF, handing each read to {@code seen}; then half-closes {@code to}. */
    private static void pump(Socket from, Socket to, java.util.function.ObjIntConsumer<byte[]> seen) {
        byte[] buf = new byte[8192];
        try {
            InputStream in = from.getInputStream();
            OutputStream out = to.getOutputStream();
            int n;
            while ((n = in.read(buf)) >= 0) {
                seen.accept(buf, n);
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
