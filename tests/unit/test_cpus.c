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

/* This process's cgroup line(s) and the mounts it sees. */
static void layout(const char *cgroup, const char *mountinfo)
{
    put("/proc/self/cgroup", cgroup);
    put("/proc/self/mountinfo", mountinfo);
}

/* A cgroup v1 directory's quota, in us per 100 ms period (-1: none). */
static void v1_quota(const char *dir, const char *quota_us)
{
    char path[256];
    snprintf(path, sizeof(path), "%s/cpu.cfs_quota_us", dir);
    put(path, quota_us);
    snprintf(path, sizeof(path), "%s/cpu.cfs_period_us", dir);
    put(path, "100000\n");
}

/* tk_usable_cpus() under root gives n, and says `why` in its reason. */
static void expect_cpus(uint32_t n, const char *why)
{
    char got[96];
    cr_assert_eq(tk_usable_cpus(root, got, sizeof(got)), n, "%s", got);
    cr_assert(strstr(got, why) != NULL, "reason \"%s\", wanted \"%s\"", got, why);
}

Test(cpus, without_a_quota_the_affinity_mask_counts)
{
    expect_cpus(affinity(), "affinity");
    layout("0::/\n", V2_MOUNT);
    put("/sys/fs/cgroup/cpu.max", "max 100000\n");
    expect_cpus(affinity(), "affinity");
}

Test(cpus, a_v2_quota_rounds_up)
{
    layout("0::/\n", V2_MOUNT);
    put("/sys/fs/cgroup/cpu.max", "50000 100000\n");
    expect_cpus(1, "v2 CPU quota of 0.50");
    put("/sys/fs/cgroup/cpu.max", "150000 100000\n");
    /* 1.5 CPUs round up to 2; a mask of 1 is tighter still. */
    if (affinity() >= 2)
        expect_cpus(2, "v2 CPU quota of 1.50");
    else
        expect_cpus(affinity(), "affinity");
}

Test(cpus, a_v2_ancestor_quota_limits_its_children)
{
    layout("0::/kubepods/pod7/ctr\n", V2_MOUNT);
    put("/sys/fs/cgroup/kubepods/pod7/ctr/cpu.max", "max 100000\n");
    put("/sys/fs/cgroup/kubepods/pod7/cpu.max", "100000 100000\n");
    put("/sys/fs/cgroup/kubepods/cpu.max", "max 100000\n");
    expect_cpus(1, "1.00");
}

Test(cpus, a_v1_quota_on_a_hybrid_node)
{
    layout("5:cpuset:/\n4:cpu,cpuacct:/batch/job1\n0::/\n", V1_MOUNTS);
    v1_quota("/sys/fs/cgroup/cpu,cpuacct/batch/job1", "-1\n");
    v1_quota("/sys/fs/cgroup/cpu,cpuacct/batch", "25000\n");
    expect_cpus(1, "v1 CPU quota of 0.25");
}

Test(cpus, a_container_sees_its_own_subtree)
{
    /* Mounted from the container's cgroup: the path in /proc/self/cgroup
     * names the host's hierarchy, the files sit at the mount point. */
    layout("4:cpu,cpuacct:/docker/abc\n",
           "32 25 0:28 /docker/abc /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpuacct,cpu\n");
    v1_quota("/sys/fs/cgroup/cpu", "50000\n");
    expect_cpus(1, "v1");
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
    layout("0::/\n", mi);
    put("/sys/fs/cgroup/cpu.max", "100000 100000\n");
    expect_cpus(1, "v2");
}

Test(cpus, the_default_runs_raft_inline_on_two_cpus_or_fewer)
{
    cr_assert_eq(tk_default_threads(1), 1);
    cr_assert_eq(tk_default_threads(2), 1);
    cr_assert_eq(tk_default_threads(3), 3);
    cr_assert_eq(tk_default_threads(16), 16);
    cr_assert_eq(tk_default_threads(200), 64);
}
