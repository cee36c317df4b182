package org.interop.admin;

import static org.interop.harness.Check.check;

import java.util.List;
import java.util.Set;
import org.apache.pulsar.common.policies.data.TenantInfo;
import org.interop.harness.Cli;
import org.interop.harness.Report;
import org.interop.harness.Rig;
import org.interop.harness.Scenario;
import org.junit.jupiter.api.Timeout;

/**
 * The {@code pulsar-admin} CLI (pulsar-client-tools, one JVM per command): {@code clusters},
 * {@code tenants} and {@code namespaces} commands, their exit codes and output; what they did is
 * read back with the Java admin API.
 */
class CliTenantsNamespacesTest {
    @Scenario("cli_clusters")
    @Timeout(Cli.SCENARIO_TIMEOUT_S)
    void clusters(Report report) {
        try (Rig r = Rig.start("cli-clusters")) {
            Cli cli = r.cli();
            cli.run("clusters", "get", "standalone").prints("\"serviceUrl\" : \"" + r.broker.adminUrl() + "\"",
                    "\"brokerServiceUrl\" : \"" + r.broker.serviceUrl() + "\"");
            cli.run("clusters", "get", "nope").refused("Cluster does not exist");
            Cli.Result list = cli.run("clusters", "list").prints("standalone");
            check(list.out().strip().equals("standalone"), "clusters list printed: " + list.describe());
        }
    }

    @Scenario("cli_tenants")

    @Timeout(Cli.SCENARIO_TIMEOUT_S)
    void tenants(Report report) {
        try (Rig r = Rig.start("cli-tenants")) {
            Cli cli = r.cli();
            String t = Rig.unique("tenant");
            cli.run("tenants", "create", t, "-r", "role-a", "-c", "standalone").ok();
            TenantInfo info = r.ok("getTenantInfo", () -> r.admin.tenants().getTenantInfo(t));
            check(info.getAdminRoles().equals(Set.of("role-a")) && info.getAllowedClusters().equals(Set.of("standalone")),
                    "after `tenants create`: " + info);
            cli.run("tenants", "get", t).prints("\"adminRoles\"", "role-a", "\"allowedClusters\"", "standalone");
            // No -c: the current clusters are kept (the CLI reads the tenant first).
            cli.run("tenants", "update", t, "-r", "role-b").ok();
            info = r.ok("getTenantInfo", () -> r.admin.tenants().getTenantInfo(t));
            check(info.getAdminRoles().equals(Set.of("role-b")) && info.getAllowedClusters().equals(Set.of("standalone")),
                    "after `tenants update -r role-b`: " + info);
            Cli.Result list = cli.run("tenants", "list").ok();
            check(List.of(list.out().strip().split("\n")).containsAll(List.of("public", t)),
                    "`tenants list` should print public and " + t + ": " + list.describe());

            cli.run("tenants", "create", t, "-c", "standalone").refused("Tenant already exist");
            r.ok("createNamespace", () -> r.admin.namespaces().createNamespace(t + "/ns"));
            cli.run("tenants", "delete", t).refused("The tenant still has active namespaces");
            r.ok("deleteNamespace", () -> r.admin.namespaces().deleteNamespace(t + "/ns"));
            cli.run("tenants", "delete", t).ok();
            check(!r.ok("getTenants", () -> r.admin.tenants().getTenants()).contains(t),
                    "`tenants delete` left " + t + " listed");
            cli.run("tenants", "get", t).refused("Tenant does not exist");
        }
    }

    @Scenario("cli_namespaces")

    @Timeout(Cli.SCENARIO_TIMEOUT_S)
    void namespaces(Report report) {
        try (Rig r = Rig.start("cli-namespaces")) {
            Cli cli = r.cli();
            String t = Rig.unique("tenant");
            r.ok("createTenant", () -> r.admin.tenants().createTenant(t,
                    TenantInfo.builder().allowedClusters(Set.of("standalone")).build()));
            String ns = t + "/ns";
            cli.run("namespaces", "create", ns).ok();
            check(r.ok("getNamespaces", () -> r.admin.namespaces().getNamespaces(t)).equals(List.of(ns)),
                    "`namespaces create` did not make " + ns);
            Cli.Result list = cli.run("namespaces", "list", t).ok();
            check(list.out().strip().equals(ns), "`namespaces list " + t + "`: " + list.describe());
            cli.run("namespaces", "policies", ns).prints("\"bundles\"", "\"deleted\" : false");

            String topic = "persistent://" + ns + "/t1";
            r.ok("createNonPartitionedTopic", () -> r.admin.topics().createNonPartitionedTopic(topic));
            Cli.Result topics = cli.run("namespaces", "topics", ns).ok();
            check(topics.out().strip().equals(topic), "`namespaces topics " + ns + "`: " + topics.describe());

            cli.run("namespaces", "create", ns).refused("Namespace already exists");
            cli.run("namespaces", "delete", ns).refused("Cannot delete non empty namespace");
            cli.run("namespaces", "delete", "-f", ns).ok();
            check(r.ok("getNamespaces", () -> r.admin.namespaces().getNamespaces(t)).isEmpty(),
                    "`namespaces delete -f` left " + ns);
            cli.run("namespaces", "policies", ns).refused("Namespace does not exist");
        }
    }
}
