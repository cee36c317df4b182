package org.interop;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.platform.engine.discovery.DiscoverySelectors.selectMethod;

import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.interop.harness.Check;
import org.interop.harness.ExpectedFailure;
import org.interop.harness.Json;
import org.interop.harness.ProcessingLog;
import org.interop.harness.Scenario;
import org.interop.harness.StickyHash;
import org.junit.jupiter.api.Test;
import org.junit.platform.launcher.Launcher;
import org.junit.platform.launcher.LauncherDiscoveryRequest;
import org.junit.platform.launcher.core.LauncherConfig;
import org.junit.platform.launcher.core.LauncherDiscoveryRequestBuilder;
import org.junit.platform.launcher.core.LauncherFactory;
import org.junit.platform.launcher.listeners.SummaryGeneratingListener;
import org.junit.platform.launcher.listeners.TestExecutionSummary;

/** The harness's own checks: the sticky hash, the order checker, the JSON reader, strict XFAIL. */
class HarnessTest {
    @Test
    void murmur3AndStickyHashMatchPulsar() {
        // Vectors shared with the Python harness and the dispatcher crate's hash tests.
        assertEquals(0x248BFA47, StickyHash.murmur3_32("hello".getBytes(StandardCharsets.UTF_8), 0));
        assertEquals(0x2E4FF723, StickyHash.murmur3_32(
                "The quick brown fox jumps over the lazy dog".getBytes(StandardCharsets.UTF_8), 0));
        assertEquals(0, StickyHash.murmur3_32(new byte[0], 0));
        assertEquals(0x514E28B7, StickyHash.murmur3_32(new byte[0], 1));
        assertEquals(0x81F16F39, StickyHash.murmur3_32(new byte[0], 0xFFFFFFFF));
        Object[][] keys = {{"NONE_KEY", 504741539, 48803}, {"key-0", 1664612543, 63679},
            {"order-42", 1259446670, 41358}, {"\u043a\u043b\u044e\u0447", 442048578, 8258}};
        for (Object[] k : keys) {
            byte[] b = ((String) k[0]).getBytes(StandardCharsets.UTF_8);
            assertEquals((int) k[1], StickyHash.murmur3_32(b, 0) & Integer.MAX_VALUE, (String) k[0]);
            assertEquals((int) k[2], StickyHash.slot((String) k[0]), (String) k[0]);
        }
    }

    private static ProcessingLog log(Object[]... recvs) {
        ProcessingLog l = new ProcessingLog();
        for (Object[] r : recvs) {
            l.recv((String) r[0], (String) r[1], (int) r[2], "id", (int) r[3]);
        }
        return l;
    }

    @Test
    void keyOrderChecker() {
        Map<String, Integer> want = Map.of("a", 2, "b", 1);
        ProcessingLog ok = log(new Object[] {"c1", "a", 0, 0}, new Object[] {"c2", "b", 0, 0},
                new Object[] {"c1", "a", 1, 0}, new Object[] {"c2", "a", 1, 1});
        ProcessingLog.Order o = ProcessingLog.checkKeyOrder(ok.snapshot(), want, Set.of());
        assertEquals(3, o.firstTime());
        assertEquals(1, o.reprocessed());
        ProcessingLog early = log(new Object[] {"c1", "a", 1, 0}, new Object[] {"c1", "a", 0, 0},
                new Object[] {"c1", "b", 0, 0});
        assertTrue(assertThrows(Check.ScenarioFailure.class,
                () -> ProcessingLog.checkKeyOrder(early.snapshot(), want, Set.of())).getMessage().contains("before a#0"));
        ProcessingLog dup = log(new Object[] {"c1", "a", 0, 0}, new Object[] {"c2", "a", 0, 0},
                new Object[] {"c1", "a", 1, 0}, new Object[] {"c1", "b", 0, 0});
        assertThrows(Check.ScenarioFailure.class, () -> ProcessingLog.checkKeyOrder(dup.snapshot(), want, Set.of()));
        ProcessingLog.checkKeyOrder(dup.snapshot(), want, Set.of("a#0"));
        ProcessingLog missing = log(new Object[] {"c1", "a", 0, 0}, new Object[] {"c1", "b", 0, 0});
        assertThrows(Check.ScenarioFailure.class, () -> ProcessingLog.checkKeyOrder(missing.snapshot(), want, Set.of()));
    }

    @Test
    void json() {
        Object v = Json.parse("{\"a\": [1, 2.5, -3e2], \"b\": {\"c\": \"x\\\"\\u00e9\"}, \"d\": null, \"e\": true}");
        assertEquals(List.of(1.0, 2.5, -300.0), Json.at(v, "a"));
        assertEquals("x\"\u00e9", Json.at(v, "b", "c"));
        assertEquals(Boolean.TRUE, Json.at(v, "e"));
        assertEquals(null, Json.at(v, "d"));
    }

    /** Fixtures for the strict expected-failure marker; run only through the launcher below. */
    static class XfailFixtures {
        @Scenario("selftest-fails-as-expected")
        @ExpectedFailure(feature = "f", matches = "feature f is missing")
        void failsAsExpected() {
            throw new Check.ScenarioFailure("feature f is missing");
        }

        @Scenario("selftest-passes")
        @ExpectedFailure(feature = "f")
        void passes() {}

        @Scenario("selftest-fails-differently")
        @ExpectedFailure(feature = "f", matches = "feature f is missing")
        void failsDifferently() {
            throw new Check.ScenarioFailure("connection refused");
        }
    }

    private static TestExecutionSummary run(String method) {
        LauncherDiscoveryRequest req = LauncherDiscoveryRequestBuilder.request()
                .selectors(selectMethod(XfailFixtures.class, method)).build();
        // Without auto-registered session listeners: the suite's own summary belongs to the outer run.
        Launcher launcher = LauncherFactory.create(LauncherConfig.builder()
                .enableLauncherSessionListenerAutoRegistration(false).build());
        SummaryGeneratingListener l = new SummaryGeneratingListener();
        launcher.execute(req, l);
        return l.getSummary();
    }

    @Test
    void expectedFailureIsStrict() {
        TestExecutionSummary ok = run("failsAsExpected");
        assertEquals(1, ok.getTestsSucceededCount(), "a matching failure is an expected failure");
        TestExecutionSummary passed = run("passes");
        assertEquals(1, passed.getTestsFailedCount(), "an unexpected pass fails");
        assertTrue(passed.getFailures().get(0).getException().getMessage().contains("remove the @ExpectedFailure marker"));
        TestExecutionSummary other = run("failsDifferently");
        assertEquals(1, other.getTestsFailedCount(), "a different failure fails");
        assertTrue(other.getFailures().get(0).getException().getMessage().contains("failed differently"));
    }
}
