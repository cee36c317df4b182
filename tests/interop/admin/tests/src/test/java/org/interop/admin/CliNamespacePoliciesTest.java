package org.interop.admin;

import static org.interop.harness.Check.check;

import java.util.Map;
import org.apache.pulsar.common.policies.data.BacklogQuota;
import org.apache.pulsar.common.policies.data.BacklogQuota.BacklogQuotaType;
import org.apache.pulsar.common.policies.data.BacklogQuota.RetentionPolicy;
import org.interop.harness.Cli;
import org.interop.harness.Report;
import org.interop.harness.Rig;
import org.interop.harness.Scenario;

/**
 * {@code pulsar-admin namespaces} message TTL and backlog quota commands; what they set is read
 * back with the Java admin API.
 */
class CliNamespacePoliciesTest {
    @Scenario("cli_message_ttl")
    void messageTtl(Report report) {
        try (Rig r = Rig.start("cli-ttl")) {
            Cli cli = r.cli();
            var n = r.admin.namespaces();
            String ns = "public/" + Rig.unique("ttl");
            r.ok("createNamespace", () -> n.createNamespace(ns));
            cli.run("namespaces", "set-message-ttl", ns, "-ttl", "1h").ok();
            Integer ttl = r.ok("getNamespaceMessageTTL", () -> n.getNamespaceMessageTTL(ns));
            check(Integer.valueOf(3600).equals(ttl), "after `set-message-ttl -ttl 1h`: " + ttl);
            Cli.Result get = cli.run("namespaces", "get-message-ttl", ns).ok();
            check(get.out().strip().equals("3600"), "`get-message-ttl`: " + get.describe());
            cli.run("namespaces", "remove-message-ttl", ns).ok();
            ttl = r.ok("getNamespaceMessageTTL", () -> n.getNamespaceMessageTTL(ns));
            check(ttl == null, "after `remove-message-ttl`: " + ttl);
            cli.run("namespaces", "set-message-ttl", "public/no-such-ns", "-ttl", "60").refused("Namespace does not exist");
        }
    }

    @Scenario("cli_backlog_quota")
    void backlogQuota(Report report) {
        try (Rig r = Rig.start("cli-quota")) {
            Cli cli = r.cli();
            var n = r.admin.namespaces();
            String ns = "public/" + Rig.unique("quota");
            r.ok("createNamespace", () -> n.createNamespace(ns));
            cli.run("namespaces", "set-backlog-quota", ns, "-l", "10M", "-p", "consumer_backlog_eviction").ok();
            cli.run("namespaces", "set-backlog-quota", ns, "-lt", "1h", "-p", "consumer_backlog_eviction",
                    "-t", "message_age").ok();
            Map<BacklogQuotaType, BacklogQuota> map = r.ok("getBacklogQuotaMap", () -> n.getBacklogQuotaMap(ns));
            BacklogQuota size = map.get(BacklogQuotaType.destination_storage);
            BacklogQuota age = map.get(BacklogQuotaType.message_age);
            check(size != null && size.getLimitSize() == 10L * 1024 * 1024
                    && size.getPolicy() == RetentionPolicy.consumer_backlog_eviction, "after `set-backlog-quota -l 10M`: " + map);
            check(age != null && age.getLimitTime() == 3600 && age.getPolicy() == RetentionPolicy.consumer_backlog_eviction,
                    "after `set-backlog-quota -lt 1h -t message_age`: " + map);
            cli.run("namespaces", "get-backlog-quotas", ns).prints("destination_storage", "message_age",
                    "limitSize=10485760", "limitTime=3600", "policy=consumer_backlog_eviction");
            cli.run("namespaces", "remove-backlog-quota", ns, "-t", "message_age").ok();
            cli.run("namespaces", "remove-backlog-quota", ns).ok();
            map = r.ok("getBacklogQuotaMap", () -> n.getBacklogQuotaMap(ns));
            check(map.isEmpty(), "after both `remove-backlog-quota`: " + map);
            cli.run("namespaces", "set-backlog-quota", ns, "-l", "10M", "-p", "producer_request_hold")
                    .refused("producer_request_hold");
            map = r.ok("getBacklogQuotaMap", () -> n.getBacklogQuotaMap(ns));
            check(map.isEmpty(), "a refused producer_request_hold quota was stored: " + map);
        }
    }
}
