package org.interop.harness;

import java.io.IOException;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;
import java.util.regex.Pattern;
import org.junit.jupiter.api.extension.ExtensionContext;
import org.junit.jupiter.api.extension.InvocationInterceptor;
import org.junit.jupiter.api.extension.ParameterContext;
import org.junit.jupiter.api.extension.ParameterResolver;
import org.junit.jupiter.api.extension.ReflectiveInvocationContext;
import org.junit.platform.commons.support.AnnotationSupport;

/**
 * Times each {@link Scenario}, gives it a {@link Report}, prints its summary line (also appended to
 * {@code summary.txt} in the log dir) and enforces {@link ExpectedFailure} strictly.
 */
public final class ScenarioExtension implements InvocationInterceptor, ParameterResolver {
    private static final ExtensionContext.Namespace NS = ExtensionContext.Namespace.create(ScenarioExtension.class);
    /** Every summary line of this JVM, in order (printed again as a table at the end). */
    public static final List<String> LINES = new ArrayList<>();
    /** Scenarios named so are the harness's own fixtures (HarnessTest): no summary line. */
    public static final String SELFTEST_PREFIX = "selftest-";

    @Override
    public boolean supportsParameter(ParameterContext pc, ExtensionContext ec) {
        return pc.getParameter().getType() == Report.class;
    }

    @Override
    public Object resolveParameter(ParameterContext pc, ExtensionContext ec) {
        return report(ec);
    }

    private static Report report(ExtensionContext ec) {
        return ec.getStore(NS).getOrComputeIfAbsent("report", k -> new Report(), Report.class);
    }

    @Override
    public void interceptTestMethod(Invocation<Void> invocation, ReflectiveInvocationContext<Method> ic,
            ExtensionContext ec) throws Throwable {
        banner();
        Method m = ic.getExecutable();
        String name = AnnotationSupport.findAnnotation(m, Scenario.class).map(Scenario::value).orElse(m.getName());
        Optional<ExpectedFailure> xf = AnnotationSupport.findAnnotation(m, ExpectedFailure.class);
        Report report = report(ec);
        long t0 = System.nanoTime();
        Throwable failure = null;
        try {
            invocation.proceed();
        } catch (Throwable t) {
            failure = t;
        }
        double secs = (System.nanoTime() - t0) / 1e9;
        String tail = String.format(" messages=%d %.1fs", report.messages(), secs);
        boolean quiet = name.startsWith(SELFTEST_PREFIX);
        String notes = report.notes();
        if (xf.isEmpty()) {
            if (failure == null) {
                emit(quiet, "scenario " + name + ": PASS" + tail, notes);
                return;
            }
            emit(quiet, "scenario " + name + ": FAIL" + tail, oneLine(failure));
            throw failure;
        }
        String feature = xf.get().feature();
        if (failure == null) {
            emit(quiet, "scenario " + name + ": UNEXPECTED-PASS(" + feature + ")" + tail,
                    "remove the @ExpectedFailure marker");
            throw new AssertionError("scenario " + name + " is marked @ExpectedFailure(feature = \"" + feature
                    + "\") but PASSED: the broker has it now; remove the @ExpectedFailure marker");
        }
        String chain = chain(failure);
        String rx = xf.get().matches();
        if (!rx.isEmpty() && !Pattern.compile(rx, Pattern.DOTALL).matcher(chain).find()) {
            emit(quiet, "scenario " + name + ": FAIL" + tail, "expected failure (" + feature + ") did not match /" + rx + "/: "
                    + oneLine(failure));
            throw new AssertionError("scenario " + name + " is an expected failure (" + feature
                    + ") but failed differently (no match for /" + rx + "/): " + oneLine(failure), failure);
        }
        emit(quiet, "scenario " + name + ": XFAIL(" + feature + ")" + tail, oneLine(failure));
    }

    private static boolean bannerShown;

    /** Once per JVM: which client, which Java, which broker, where the logs go. */
    private static synchronized void banner() {
        if (bannerShown) {
            return;
        }
        bannerShown = true;
        String bin;
        try {
            bin = Env.brokerBin();
        } catch (IllegalStateException e) {
            bin = "(" + e.getMessage() + ")";
        }
        System.out.println("interop: client " + Env.client() + " on Java " + System.getProperty("java.version")
                + "; broker " + bin + " " + String.join(" ", Env.brokerArgs()) + "; logs in " + Env.logDir());
        System.out.flush();
    }

    private static String chain(Throwable t) {
        StringBuilder b = new StringBuilder();
        for (int i = 0; t != null && i < 10; i++, t = t.getCause()) {
            b.append(t.getClass().getName()).append(": ").append(t.getMessage()).append('\n');
            for (Throwable s : t.getSuppressed()) {
                b.append("suppressed ").append(s.getClass().getName()).append(": ").append(s.getMessage()).append('\n');
            }
        }
        return b.toString();
    }

    private static String oneLine(Throwable t) {
        Throwable root = t;
        StringBuilder b = new StringBuilder(t.getClass().getSimpleName() + ": " + t.getMessage());
        for (int i = 0; root.getCause() != null && root.getCause() != root && i < 5; i++) {
            root = root.getCause();
        }
        if (root != t) {
            b.append(" <- ").append(root.getClass().getSimpleName()).append(": ").append(root.getMessage());
        }
        String s = b.toString().replace('\n', ' ');
        return s.length() > 400 ? s.substring(0, 400) + "…" : s;
    }

    private static synchronized void emit(boolean quiet, String line, String detail) {
        if (quiet) {
            return;
        }
        LINES.add(line);
        System.out.println(line + (detail == null || detail.isEmpty() ? "" : "  -- " + detail));
        System.out.flush();
        try {
            Files.writeString(Env.logDir().resolve("summary.txt"),
                    line + (detail == null || detail.isEmpty() ? "" : "  -- " + detail) + "\n", StandardCharsets.UTF_8,
                    StandardOpenOption.CREATE, StandardOpenOption.APPEND);
        } catch (IOException ignored) {
            // the console has it
        }
    }
}
