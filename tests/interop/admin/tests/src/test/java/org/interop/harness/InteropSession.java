package org.interop.harness;

import org.junit.platform.launcher.LauncherSession;
import org.junit.platform.launcher.LauncherSessionListener;

/**
 * Runs before any test class is loaded (registered in META-INF/services): sets the client's log
 * file (slf4j-simple) in the log dir; at the end prints the summary lines again.
 */
public final class InteropSession implements LauncherSessionListener {
    @Override
    public void launcherSessionOpened(LauncherSession session) {
        String log = Env.logDir().resolve("client-java.log").toString();
        try {
            java.nio.file.Files.deleteIfExists(Env.logDir().resolve("summary.txt"));
        } catch (java.io.IOException ignored) {
            // appended to below
        }
        System.setProperty("org.slf4j.simpleLogger.logFile", log);
        System.setProperty("org.slf4j.simpleLogger.defaultLogLevel", "info");
        System.setProperty("org.slf4j.simpleLogger.showDateTime", "true");
        System.setProperty("org.slf4j.simpleLogger.dateTimeFormat", "HH:mm:ss.SSS");
    }

    @Override
    public void launcherSessionClosed(LauncherSession session) {
        if (ScenarioExtension.LINES.isEmpty()) {
            return;
        }
        StringBuilder b = new StringBuilder("interop summary (" + Env.client() + "):\n");
        for (String l : ScenarioExtension.LINES) {
            b.append("  ").append(l).append('\n');
        }
        System.out.print(b);
        System.out.flush();
    }
}
