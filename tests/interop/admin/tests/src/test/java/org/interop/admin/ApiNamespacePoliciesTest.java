package org.interop.admin;

import static org.interop.harness.Check.check;

import java.util.Map;
import org.apache.pulsar.client.admin.PulsarAdminException;
import org.apache.pulsar.client.admin.PulsarAdminException.NotFoundException;
import org.apache.pulsar.client.admin.PulsarAdminException.PreconditionFailedException;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.common.policies.data.BacklogQuota;
import org.apache.pulsar.common.policies.data.BacklogQuota.BacklogQuotaType;
import org.apache.pulsar.common.policies.data.BacklogQuota.RetentionPolicy;
import org.apache.pulsar.common.policies.data.DispatchRate;
import org.apache.pulsar.common.policies.data.PersistencePolicies;
import org.interop.harness.Report;
import org.interop.harness.Rig;
import org.interop.harness.Scenario;

/**
 * Namespace policies through the Java admin API: message TTL and backlog quotas (set, get, remove,
 * and their effect on a subscription's backlog, with the broker's check intervals shortened), the
 * backlog-quota policies the broker does not enforce, and a policy it does not serve.
 */
class ApiNamespacePoliciesTest {
    @Scenario("api_message_ttl")
    void messageTtl(Report report) throws Exception {
        try (Rig r = Rig.start("api-ttl", "--message-expiry-check-interval-ms", "200")) {
            var n = r.admin.namespaces();
            String ns = "public/" + Rig.unique("ttl");
            r.ok("createNamespace", () -> n.createNamespace(ns));
            Integer ttl = r.ok("getNamespaceMessageTTL (unset)", () -> n.getNamespaceMessageTTL(ns));
            check(ttl == null, "getNamespaceMessageTTL of a new namespace = " + ttl + ", expected null");
            r.ok("setNamespaceMessageTTL(3600)", () -> n.setNamespaceMessageTTL(ns, 3600));
            ttl = r.ok("getNamespaceMessageTTL", () -> n.getNamespaceMessageTTL(ns));
            check(Integer.valueOf(3600).equals(ttl), "getNamespaceMessageTTL after set 3600 = " + ttl);
            r.ok("removeNamespaceMessageTTL", () -> n.removeNamespaceMessageTTL(ns));
            ttl = r.ok("getNamespaceMessageTTL after remove", () -> n.getNamespaceMessageTTL(ns));
            check(ttl == null, "getNamespaceMessageTTL after remove = " + ttl + ", expected null");
            r.refused("setNamespaceMessageTTL(-5)", PreconditionFailedException.class, 412, "Invalid value for message TTL",
                    () -> n.setNamespaceMessageTTL(ns, -5));
            r.refused("setNamespaceMessageTTL (missing namespace)", NotFoundException.class, 404, null,
                    () -> n.setNamespaceMessageTTL("public/no-such-ns", 60));

            // The effect: a TTL of 1 s expires a backlog of 5 (checked every 200 ms).
            String topic = "persistent://" + ns + "/" + Rig.unique("t");
            Fixtures.subscription(r, topic, "s");
            try (Producer<byte[]> p = Fixtures.producer(r, topic)) {
                Fixtures.send(p, "m", 5);
            }
            Fixtures.awaitBacklog(r, topic, "s", 5, 5, "sending 5");
            r.ok("setNamespaceMessageTTL(1)", () -> n.setNamespaceMessageTTL(ns, 1));
            long t0 = System.nanoTime();
            Fixtures.awaitBacklog(r, topic, "s", 0, 10, "a message TTL of 1 s");
            report.messages(5);
            report.note(String.format("TTL 1 s expired a backlog of 5 in %.1f s", (System.nanoTime() - t0) / 1e9));
        }
    }

    @Scenario("api_backlog_quota")
    void backlogQuota(Report report) throws Exception {
        try (Rig r = Rig.start("api-quota", "--backlog-quota-check-interval-ms", "200")) {
            var n = r.admin.namespaces();
            String ns = "public/" + Rig.unique("quota");
            r.ok("createNamespace", () -> n.createNamespace(ns));
            Map<BacklogQuotaType, BacklogQuota> map = r.ok("getBacklogQuotaMap (unset)", () -> n.getBacklogQuotaMap(ns));
            check(map.isEmpty(), "getBacklogQuotaMap of a new namespace = " + map);

            // The effect first: 20 messages of 1 KiB against a 4 KiB destination_storage quota.
            String topic = "persistent://" + ns + "/" + Rig.unique("t");
            Fixtures.subscription(r, topic, "s");
            try (Producer<byte[]> p = Fixtures.producer(r, topic)) {
                for (int i = 0; i < 20; i++) {
                    p.send(new byte[1024]);
                }
            }
            Fixtures.awaitBacklog(r, topic, "s", 20, 5, "sending 20");
            BacklogQuota size = BacklogQuota.builder().limitSize(4096)
                    .retentionPolicy(RetentionPolicy.consumer_backlog_eviction).build();
            r.ok("setBacklogQuota(destination_storage 4 KiB)", () -> n.setBacklogQuota(ns, size));
            org.interop.harness.Check.waitUntil(() -> Fixtures.backlog(r, topic, "s") <= 4, 10,
                    "consumer_backlog_eviction of a 20 KiB backlog down to 4 KiB");
            long left = Fixtures.backlog(r, topic, "s");

            BacklogQuota age = BacklogQuota.builder().limitTime(3600)
                    .retentionPolicy(RetentionPolicy.consumer_backlog_eviction).build();
            r.ok("setBacklogQuota(message_age 3600 s)", () -> n.setBacklogQuota(ns, age, BacklogQuotaType.message_age));
            map = r.ok("getBacklogQuotaMap", () -> n.getBacklogQuotaMap(ns));
            BacklogQuota gotSize = map.get(BacklogQuotaType.destination_storage);
            BacklogQuota gotAge = map.get(BacklogQuotaType.message_age);
            check(gotSize != null && gotSize.getLimitSize() == 4096
                    && gotSize.getPolicy() == RetentionPolicy.consumer_backlog_eviction,
                    "getBacklogQuotaMap destination_storage = " + gotSize + " (map " + map + ")");
            check(gotAge != null && gotAge.getLimitTime() == 3600
                    && gotAge.getPolicy() == RetentionPolicy.consumer_backlog_eviction,
                    "getBacklogQuotaMap message_age = " + gotAge + " (map " + map + ")");

            r.ok("removeBacklogQuota(message_age)", () -> n.removeBacklogQuota(ns, BacklogQuotaType.message_age));
            map = r.ok("getBacklogQuotaMap after remove", () -> n.getBacklogQuotaMap(ns));
            check(map.keySet().equals(java.util.Set.of(BacklogQuotaType.destination_storage)),
                    "after removeBacklogQuota(message_age): " + map);
            r.ok("removeBacklogQuota", () -> n.removeBacklogQuota(ns));
            map = r.ok("getBacklogQuotaMap after remove all", () -> n.getBacklogQuotaMap(ns));
            check(map.isEmpty(), "after removeBacklogQuota(): " + map);

            for (RetentionPolicy refused : new RetentionPolicy[] {RetentionPolicy.producer_request_hold,
                    RetentionPolicy.producer_exception}) {
                BacklogQuota q = BacklogQuota.builder().limitSize(1 << 20).retentionPolicy(refused).build();
                r.refused("setBacklogQuota(" + refused + ")", PulsarAdminException.class, 400, refused.name(),
                        () -> n.setBacklogQuota(ns, q));
            }
            r.refused("setBacklogQuota (missing namespace)", NotFoundException.class, 404, null,
                    () -> n.setBacklogQuota("public/no-such-ns", size));
            report.messages(20);
            report.note("consumer_backlog_eviction left " + left + " of 20 (1 KiB each, quota 4 KiB)");
        }
    }

    @Scenario("api_unsupported_policy")
    void unsupportedPolicy(Report report) {
        try (Rig r = Rig.start("api-unsupported")) {
            var n = r.admin.namespaces();
            String ns = "public/" + Rig.unique("ns");
            r.ok("createNamespace", () -> n.createNamespace(ns));
            // Two policies a one-node broker without BookKeeper or rate limiting does not enforce.
            PulsarAdminException e = r.refused("setPersistence", PulsarAdminException.class, 400, "persistence",
                    () -> n.setPersistence(ns, new PersistencePolicies(2, 2, 2, 0)));
            PulsarAdminException e2 = r.refused("setDispatchRate", PulsarAdminException.class, 400, "dispatchRate",
                    () -> n.setDispatchRate(ns, DispatchRate.builder().dispatchThrottlingRateInMsg(100).build()));
            report.note("setPersistence: " + e.getMessage() + "; setDispatchRate: " + e2.getMessage());
        }
    }
}
