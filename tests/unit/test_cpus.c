/* The default worker count: the CPUs a process may use, read from fake
 * /proc and /sys trees shaped like a host, a cgroup v2 container and a
 * cgroup v1 (hybrid) node. */
#include "net/config.h"

#include <criterion/criterion.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static char root[64];

static void put(const char *path, const char *text)
{
    char full[512];
    snprintf(full, sizeof(full), "%s%s", root, path);
    for (char *p = full + strlen(root) + 1; *p != 0; p++)
        if (*p == '/') {
            *p = 0;
            mkdir(full, 0755);
            *p = '/';
        }
    FILE *f = fopen(full, "w");
    cr_assert_not_null(f, "%s", full);
    fputs(text, f);
    fclose(f);
}

static void setup(void)
{
    snprintf(root, sizeof(root), "/tmp/tk-cpus.XXXXXX");
    cr_assert_not_null(mkdtemp(root));
}

static void teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
    cr_assert_eq(system(cmd), 0);
}

static uint32_t affinity(void)
{
    cpu_set_t set;
    cr_assert_eq(sched_getaffinity(0, sizeof(set), &set), 0);
    return (uint32_t)CPU_COUNT(&set);
}

#define V2_MOUNT "30 25 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"
#define V1_MOUNTS                                                       \
    "30 25 0:26 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n"     \
    "31 25 0:27 / /sys/fs/cgroup/cpuset rw - cgroup cgroup rw,cpuset\n" \
    "32 25 0:28 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n"

TestSuite(cpus, .init = setup, .fini = teardown);

Test(cpus, without_a_quota_the_affinity_mask_counts)
{
    char why[96];
    cr_assert_eq(tk_usable_cpus(root, why, sizeof(why)), affinity(), "no /proc at all");
    cr_assert(strstr(why, "affinity") != NULL, "%s", why);
    put("/proc/self/cgroup", "0::/\n");
    put("/proc/self/mountinfo", V2_MOUNT);
    put("/sys/fs/cgroup/cpu.max", "max 100000\n");
    cr_assert_eq(tk_usable_cpus(root, why, sizeof(why)), affinity(), "cpu.max says max");
    cr_assert(strstr(why, "affinity") != NULL, "%s", why);
}

Test(cpus, a_v2_quota_rounds_up)
{
    char why[96];
    put("/proc/self/cgroup", "0::/\n");
    put("/proc/self/mountinfo", V2_MOUNT);
    put("/sys/fs/cgroup/cpu.max", "50000 100000\n");
    cr_assert_eq(tk_usable_cpus(root, why, sizeof(why)), 1);
    cr_assert(strstr(why, "v2 CPU quota of 0.50") != NULL, "%s", why);
    put("/sys/fs/cgroup/cpu.max", "150000 100000\n");
    cr_assert_eq(tk_usable_cpus(root, why, sizeof(why)), affinity() < 2 ? affinity() : 2);
}

Test(cpus, a_v2_ancestor_quota_limits_its_children)
{
    char why[96];
    put("/proc/self/cgroup", "0::/kubepods/pod7/ctr\n");
    put("/proc/self/mountinfo", V2_MOUNT);
    put("/sys/fs/cgroup/kubepods/pod7/ctr/cpu.max", "max 100000\n");
    put("/sys/fs/cgroup/kubepods/pod7/cpu.max", "100000 100000\n");
    put("/sys/fs/cgroup/kubepods/cpu.max", "max 100000\n");
    cr_assert_eq(tk_usable_cpus(root, why, sizeof(why)), 1);
    cr_assert(strstr(why, "1.00") != NULL, "%s", why);
}

Test(cpus, a_v1_quota_on_a_hybrid_node)
{
    char why[96];
    put("/proc/self/cgroup", "5:cpuset:/\n4:cpu,cpuacct:/batch/job1\n0::/\n");
    put("/proc/self/mountinfo", V1_MOUNTS);
    put("/sys/fs/cgroup/cpu,cpuacct/batch/job1/cpu.cfs_quota_us", "-1\n");
    put("/sys/fs/cgroup/cpu,cpuacct/batch/job1/cpu.cfs_period_us", "100000\n");
    put("/sys/fs/cgroup/cpu,cpuacct/batch/cpu.cfs_quota_us", "25000\n");
    put("/sys/fs/cgroup/cpu,cpuacct/batch/cpu.cfs_period_us", "100000\n");
    cr_assert_eq(tk_usable_cpus(root, why, sizeof(why)), 1);
    cr_assert(strstr(why, "v1 CPU quota of 0.25") != NULL, "%s", why);
}

Test(cpus, a_container_sees_its_own_subtree)
{
    /* Mounted from the container's cgroup: the path in /proc/self/cgroup
     * names the host's hierarchy, the files sit at the mount point. */
    char why[96];
    put("/proc/self/cgroup", "4:cpu,cpuacct:/docker/abc\n");
    put("/proc/self/mountinfo",
        "32 25 0:28 /docker/abc /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpuacct,cpu\n");
    put("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", "50000\n");
    put("/sys/fs/cgroup/cpu/cpu.cfs_period_us", "100000\n");
    cr_assert_eq(tk_usable_cpus(root, why, sizeof(why)), 1);
    cr_assert(strstr(why, "v1") != NULL, "%s", why);
}

Test(cpus, a_long_mountinfo_is_read_to_its_end)
{
    /* A node with thousands of mounts (volumes, overlays) before the cgroup
     * one: over 200 KiB of mountinfo. */
    static char mi[300000];
    size_t off = 0;
    for (int i = 0; i < 3000; i++)
        off += (size_t)snprintf(
            mi + off, sizeof(mi) - off,
            "%d 25 0:%d / /var/lib/kubelet/pods/%06d/volumes rw - tmpfs tmpfs rw\n", 100 + i,
            100 + i, i);
    snprintf(mi + off, sizeof(mi) - off, "%s", V2_MOUNT);
    char why[96];
    put("/proc/self/cgroup", "0::/\n");
    put("/proc/self/mountinfo", mi);
    put("/sys/fs/cgroup/cpu.max", "100000 100000\n");
    cr_assert_eq(tk_usable_cpus(root, why, sizeof(why)), 1);
    cr_assert(strstr(why, "v2") != NULL, "%s", why);
}

Test(cpus, the_default_runs_raft_inline_on_two_cpus_or_fewer)
{
    cr_assert_eq(tk_default_threads(1), 1);
    cr_assert_eq(tk_default_threads(2), 1);
    cr_assert_eq(tk_default_threads(3), 3);
    cr_assert_eq(tk_default_threads(16), 16);
    cr_assert_eq(tk_default_threads(200), 64);
}
