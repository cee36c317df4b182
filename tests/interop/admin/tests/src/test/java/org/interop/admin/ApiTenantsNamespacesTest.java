package org.interop.admin;

import static org.interop.harness.Check.check;

import java.util.List;
import java.util.Set;
import org.apache.pulsar.client.admin.PulsarAdminException.ConflictException;
import org.apache.pulsar.client.admin.PulsarAdminException.NotFoundException;
import org.apache.pulsar.client.admin.PulsarAdminException.PreconditionFailedException;
import org.apache.pulsar.common.policies.data.ClusterData;
import org.apache.pulsar.common.policies.data.Policies;
import org.apache.pulsar.common.policies.data.TenantInfo;
import org.interop.harness.Report;
import org.interop.harness.Rig;
import org.interop.harness.Scenario;

/**
 * Pulsar's Java admin API ({@code PulsarAdmin}, pulsar-client-admin-original): {@code clusters()},
 * {@code tenants()} and {@code namespaces()} create/get/list/update/delete, and the typed
 * exceptions for the broker's refusals.
 */
class ApiTenantsNamespacesTest {
    static TenantInfo tenant(Set<String> roles, Set<String> clusters) {
        return TenantInfo.builder().adminRoles(roles).allowedClusters(clusters).build();
    }

    @Scenario("api_clusters")
    void clusters(Report report) {
        try (Rig r = Rig.start("api-clusters")) {
            List<String> cs = r.ok("clusters().getClusters()", () -> r.admin.clusters().getClusters());
            check(cs.equals(List.of("standalone")), "getClusters() = " + cs + ", expected [standalone]");
            ClusterData cd = r.ok("clusters().getCluster(standalone)", () -> r.admin.clusters().getCluster("standalone"));
            check(r.broker.adminUrl().equals(cd.getServiceUrl()),
                    "getCluster(standalone).serviceUrl = " + cd.getServiceUrl() + ", expected " + r.broker.adminUrl());
            check(r.broker.serviceUrl().equals(cd.getBrokerServiceUrl()), "getCluster(standalone).brokerServiceUrl = "
                    + cd.getBrokerServiceUrl() + ", expected " + r.broker.serviceUrl());
            r.refused("clusters().getCluster(nope)", NotFoundException.class, 404, "Cluster does not exist",
                    () -> r.admin.clusters().getCluster("nope"));
            report.note("getClusters " + cs + ", getCluster -> " + cd.getServiceUrl() + " " + cd.getBrokerServiceUrl());
        }
    }

    @Scenario("api_tenants")
    void tenants(Report report) {
        try (Rig r = Rig.start("api-tenants")) {
            var t = r.admin.tenants();
            String name = Rig.unique("tenant");
            r.ok("createTenant", () -> t.createTenant(name, tenant(Set.of("role-a"), Set.of("standalone"))));
            List<String> all = r.ok("getTenants", t::getTenants);
            check(all.contains(name) && all.contains("public"), "getTenants() = " + all + ": expected " + name + " and public");
            TenantInfo got = r.ok("getTenantInfo", () -> t.getTenantInfo(name));
            check(got.getAdminRoles().equals(Set.of("role-a")) && got.getAllowedClusters().equals(Set.of("standalone")),
                    "getTenantInfo = " + got);

            r.ok("updateTenant", () -> t.updateTenant(name, tenant(Set.of("role-b", "role-c"), Set.of("standalone"))));
            got = r.ok("getTenantInfo after update", () -> t.getTenantInfo(name));
            check(got.getAdminRoles().equals(Set.of("role-b", "role-c")), "getTenantInfo after updateTenant = " + got);

            r.refused("createTenant (exists)", ConflictException.class, 409, "Tenant already exist",
                    () -> t.createTenant(name, tenant(Set.of(), Set.of("standalone"))));
            r.refused("createTenant (no clusters)", PreconditionFailedException.class, 412, "Clusters can not be empty",
                    () -> t.createTenant(Rig.unique("t"), tenant(Set.of(), Set.of())));
            r.refused("createTenant (unknown cluster)", PreconditionFailedException.class, 412, "Clusters do not exist",
                    () -> t.createTenant(Rig.unique("t"), tenant(Set.of(), Set.of("nope"))));
            r.refused("createTenant (invalid name)", PreconditionFailedException.class, 412, "Tenant name is not valid",
                    () -> t.createTenant("bad!name", tenant(Set.of(), Set.of("standalone"))));
            r.refused("getTenantInfo (missing)", NotFoundException.class, 404, "Tenant does not exist",
                    () -> t.getTenantInfo("no-such-tenant"));
            r.refused("updateTenant (missing)", NotFoundException.class, 404, "Tenant does not exist",
                    () -> t.updateTenant("no-such-tenant", tenant(Set.of(), Set.of("standalone"))));

            String ns = name + "/ns";
            r.ok("createNamespace", () -> r.admin.namespaces().createNamespace(ns));
            r.refused("deleteTenant (has a namespace)", ConflictException.class, 409,
                    "The tenant still has active namespaces", () -> t.deleteTenant(name));
            r.ok("deleteNamespace", () -> r.admin.namespaces().deleteNamespace(ns));
            r.ok("deleteTenant", () -> t.deleteTenant(name));
            all = r.ok("getTenants after delete", t::getTenants);
            check(!all.contains(name), "getTenants() after deleteTenant still lists " + name + ": " + all);
            r.refused("deleteTenant (missing)", NotFoundException.class, 404, "Tenant does not exist",
                    () -> t.deleteTenant(name));
            report.note("created, updated, deleted " + name + "; 7 refusals as typed exceptions");
        }
    }

    @Scenario("api_namespaces")
    void namespaces(Report report) {
        try (Rig r = Rig.start("api-namespaces")) {
            var n = r.admin.namespaces();
            String tenant = Rig.unique("tenant");
            r.ok("createTenant", () -> r.admin.tenants().createTenant(tenant, tenant(Set.of(), Set.of("standalone"))));
            String ns = tenant + "/ns1";
            r.ok("createNamespace", () -> n.createNamespace(ns));
            List<String> list = r.ok("getNamespaces", () -> n.getNamespaces(tenant));
            check(list.equals(List.of(ns)), "getNamespaces(" + tenant + ") = " + list + ", expected [" + ns + "]");
            Policies p = r.ok("getPolicies", () -> n.getPolicies(ns));
            check(p != null && !p.deleted, "getPolicies(" + ns + ") = " + p);
            check(p.message_ttl_in_seconds == null && p.backlog_quota_map.isEmpty(),
                    "a fresh namespace's policies have no message TTL and no backlog quota: " + p);

            r.refused("createNamespace (exists)", ConflictException.class, 409, "Namespace already exists",
                    () -> n.createNamespace(ns));
            r.refused("createNamespace (no tenant)", NotFoundException.class, 404, "Tenant does not exist",
                    () -> n.createNamespace("no-such-tenant/ns"));
            r.refused("getPolicies (missing)", NotFoundException.class, 404, "Namespace does not exist",
                    () -> n.getPolicies(tenant + "/nope"));
            r.refused("getNamespaces (no tenant)", NotFoundException.class, 404, "Tenant does not exist",
                    () -> n.getNamespaces("no-such-tenant"));
            r.refused("getTopics (missing)", NotFoundException.class, 404, null, () -> n.getTopics(tenant + "/nope"));

            List<String> topics = r.ok("getTopics (empty)", () -> n.getTopics(ns));
            check(topics.isEmpty(), "getTopics of a new namespace = " + topics);
            String topic = "persistent://" + ns + "/t1";
            r.ok("createNonPartitionedTopic", () -> r.admin.topics().createNonPartitionedTopic(topic));
            topics = r.ok("getTopics", () -> n.getTopics(ns));
            check(topics.equals(List.of(topic)), "getTopics(" + ns + ") = " + topics + ", expected [" + topic + "]");

            r.refused("deleteNamespace (has a topic)", ConflictException.class, 409, "Cannot delete non empty namespace",
                    () -> n.deleteNamespace(ns));
            r.ok("deleteNamespace(force)", () -> n.deleteNamespace(ns, true));
            list = r.ok("getNamespaces after delete", () -> n.getNamespaces(tenant));
            check(list.isEmpty(), "getNamespaces after deleteNamespace(force) = " + list);
            r.refused("deleteNamespace (missing)", NotFoundException.class, 404, "Namespace does not exist",
                    () -> n.deleteNamespace(ns));

            String ns2 = tenant + "/ns2";
            r.ok("createNamespace ns2", () -> n.createNamespace(ns2));
            r.ok("deleteNamespace (empty)", () -> n.deleteNamespace(ns2));
            r.ok("deleteTenant", () -> r.admin.tenants().deleteTenant(tenant));
            report.note("policies of a fresh namespace: bundles " + p.bundles + ", auth " + p.auth_policies);
        }
    }
}
