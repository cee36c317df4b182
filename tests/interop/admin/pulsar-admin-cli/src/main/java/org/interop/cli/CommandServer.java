package org.interop.cli;

import java.io.ByteArrayOutputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.EOFException;
import java.io.FileDescriptor;
import java.io.FileInputStream;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.io.PrintStream;
import java.lang.reflect.Field;
import java.nio.charset.StandardCharsets;
import java.util.Properties;
import org.apache.pulsar.admin.cli.PulsarAdminSupplier;
import org.apache.pulsar.admin.cli.PulsarAdminTool;
import org.apache.pulsar.client.admin.PulsarAdmin;

/**
 * Runs {@code pulsar-admin} commands one after another in this JVM, as the tool's {@code main}
 * runs one: a new {@link PulsarAdminTool} built from the client configuration file, then its
 * {@code run(args)}, whose result {@code main} turns into exit code 0 or 1. What the command
 * prints to {@code System.out} and {@code System.err} (its log too) is captured and sent back.
 *
 * <p>The suite's {@code Cli} starts this class on the tool's own classpath and speaks to it over
 * stdin and stdout, which carry only this protocol (everything else the JVM prints goes to
 * stderr): a request is an {@code int} argument count and that many modified-UTF-8 strings, the
 * configuration file first; the reply is the exit code as an {@code int}, then stdout and stderr,
 * each an {@code int} length and that many UTF-8 bytes. End of input ends the server.
 *
 * <p>One JVM start for a whole run instead of one per command (2-7 s each on a loaded 2-core
 * machine): the suite's CLI scenarios took about 280 s that way.
 */
public final class CommandServer {
    private CommandServer() {}

    /** The tool with its protected {@code run} reachable. */
    private static final class Tool extends PulsarAdminTool {
        Tool(Properties properties) throws Exception {
            super(properties);
        }

        boolean runCommand(String[] args) {
            return run(args);
        }
    }

    public static void main(String[] ignored) throws IOException {
        DataInputStream in = new DataInputStream(new FileInputStream(FileDescriptor.in));
        DataOutputStream reply = new DataOutputStream(new FileOutputStream(FileDescriptor.out));
        PrintStream stderr = new PrintStream(new FileOutputStream(FileDescriptor.err), true, StandardCharsets.UTF_8);
        // Nothing but replies on stdout, and no command reads the protocol's input.
        System.setOut(stderr);
        System.setIn(InputStream.nullInputStream());
        while (true) {
            String[] request;
            try {
                int n = in.readInt();
                request = new String[n];
                for (int i = 0; i < n; i++) {
                    request[i] = in.readUTF();
                }
            } catch (EOFException e) {
                return;
            }
            ByteArrayOutputStream out = new ByteArrayOutputStream();
            ByteArrayOutputStream err = new ByteArrayOutputStream();
            int exit = run(request, out, err);
            System.setOut(stderr);
            System.setErr(stderr);
            reply.writeInt(exit);
            write(reply, out);
            write(reply, err);
            reply.flush();
        }
    }

    private static void write(DataOutputStream reply, ByteArrayOutputStream bytes) throws IOException {
        reply.writeInt(bytes.size());
        bytes.writeTo(reply);
    }

    /** One command: {@code request[0]} is the configuration file, the rest the tool's arguments. */
    private static int run(String[] request, OutputStream out, OutputStream err) {
        PrintStream o = new PrintStream(out, true, StandardCharsets.UTF_8);
        PrintStream e = new PrintStream(err, true, StandardCharsets.UTF_8);
        System.setOut(o);
        System.setErr(e);
        Tool tool = null;
        try {
            Properties properties = new Properties();
            try (FileInputStream f = new FileInputStream(request[0])) {
                properties.load(f);
            }
            String[] args = new String[request.length - 1];
            System.arraycopy(request, 1, args, 0, args.length);
            tool = new Tool(properties);
            return tool.runCommand(args) ? 0 : 1;
        } catch (Throwable t) {
            // The tool's main would end the JVM with this stack trace and a non-zero code.
            t.printStackTrace(e);
            return 1;
        } finally {
            if (tool != null) {
                close(tool.getPulsarAdminSupplier());
            }
            o.flush();
            e.flush();
        }
    }

    /** Closes the admin client the command built, if it built one (its HTTP client's threads). */
    private static void close(PulsarAdminSupplier supplier) {
        try {
            Field f = PulsarAdminSupplier.class.getDeclaredField("admin");
            f.setAccessible(true);
            Object admin = f.get(supplier);
            if (admin instanceof PulsarAdmin a) {
                a.close();
            }
        } catch (ReflectiveOperationException | RuntimeException ex) {
            ex.printStackTrace();
        }
    }
}
