# Ports for the shell scripts that start servers on 127.0.0.1 (sourced, not
# run): tests/integ/test_install.sh, tests/fencing/test_fencing_pg.sh and
# bench/lib.sh.
#
# Tests run side by side (ctest -j2, criterion's own workers), and checking
# that a port is free does not keep it free until a server binds it. So
# every Ticketing test harness (this file, tests/support/tk_test.c, the
# conformance runner, the Python and Go client tests) also locks the ports
# it picks: ports come in blocks of 4 starting at a multiple of 4, and a
# block is taken by an flock on /tmp/ticketing-test-ports/<first port>,
# held until the process exits. Here the lock's descriptor stays open in
# the calling shell, and the servers it starts inherit it.

# True if nothing listens on 127.0.0.1:$1.
port_free() {
    ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# reserve_ports N: sets PORT to the first of N consecutive free ports below
# the kernel's ephemeral range (where no outgoing connection can hold one)
# and locks their blocks for the rest of this shell. Must run in the shell
# that keeps the ports, not in $(...), or the locks die with the subshell.
reserve_ports() {
    local n=$1 lo=10000 hi p i b fd ok fds locks=yes
    hi=$(awk '{print $1}' /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
    hi=$((hi - n - 4))
    ((hi > lo + 1000)) || hi=$((lo + 1000))
    mkdir -p /tmp/ticketing-test-ports 2>/dev/null || true
    [[ -w /tmp/ticketing-test-ports ]] || locks=no # the free check alone
    for _ in $(seq 200); do
        p=$(((lo + (RANDOM * 32768 + RANDOM) % (hi - lo)) & ~3))
        ok=yes
        for ((i = 0; i < n; i++)); do
            port_free $((p + i)) || { ok=no; break; }
        done
        [[ $ok == yes ]] || continue
        fds=()
        for ((b = p; b < p + n; b += 4)); do
            [[ $locks == yes ]] || break
            exec {fd}>>"/tmp/ticketing-test-ports/$b"
            if flock -n "$fd"; then
                fds+=("$fd")
            else
                exec {fd}>&-
                ok=no
                break
            fi
        done
        if [[ $ok == yes ]]; then
            PORT=$p
            return 0
        fi
        for fd in "${fds[@]}"; do exec {fd}>&-; done
    done
    return 1
}
