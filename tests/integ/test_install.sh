#!/usr/bin/env bash
# Goal: prove that what `cmake --install` puts down is enough to run
# Ticketing and to build programs against libticketing, with nothing taken
# from the source or build tree.
#
# Method: install BUILD_DIR into a temporary prefix; check the layout (the
# programs, the header, libticketing.so with its soname links, exporting
# only tk_client_*, libticketing.a, ticketing.pc, the CMake package, the
# LICENSE, the completions where the tree has them, and no internal
# library; the Runtime component alone holds only the programs, LICENSE
# and completions). Build
# tests/integ/install_consumer.c three ways from the prefix only: with
# `pkg-config --cflags --libs ticketing` against libticketing.so, with
# `pkg-config --static --libs ticketing` against libticketing.a (the
# result must not need libticketing.so), and through a small CMake project
# using find_package(ticketing) (both imported targets). Start the
# installed ticketingd on 127.0.0.1, wait until the installed ticketctl
# gets an answer from it, and run the three programs: each acquires a key,
# checks the token and the holder, releases it and checks the key is free.
#
# Usage: tests/integ/test_install.sh BUILD_DIR
# Exit: 0 pass, 1 fail, 77 skip (no cc, pkg-config or cmake on PATH).
set -euo pipefail

build=$(cd "${1:?usage: $0 BUILD_DIR}" && pwd)
src=$(cd "$(dirname "$0")/../.." && pwd)

say() { echo "install: $*"; }
skip() { say "SKIP: $*"; exit 77; }
fail() { say "FAIL: $*"; exit 1; }

for tool in cc pkg-config cmake; do
  command -v "$tool" >/dev/null || skip "no $tool on PATH"
done
[ -f "$build/CMakeCache.txt" ] || fail "$build is not a CMake build directory"
[ -x "$build/ticketingd" ] || fail "no $build/ticketingd (build first)"

cache() { sed -n "s/^$1:[A-Z]*=//p" "$build/CMakeCache.txt"; }
libdir=$(cache CMAKE_INSTALL_LIBDIR)
[ -n "$libdir" ] || fail "no CMAKE_INSTALL_LIBDIR in $build/CMakeCache.txt"
# A sanitizer build's library needs the sanitizer's runtime in every
# program that links it.
case "$(cache TK_SANITIZE)" in
  address) san=("-fsanitize=address,undefined") ;;
  thread) san=(-fsanitize=thread) ;;
  *) san=() ;;
esac

tmp=$(mktemp -d /tmp/tk-install.XXXXXX)
tk_pid=""
cleanup() {
  set +e
  if [ -n "$tk_pid" ]; then
    kill "$tk_pid" 2>/dev/null
    for _ in $(seq 50); do kill -0 "$tk_pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$tk_pid" 2>/dev/null
    wait "$tk_pid" 2>/dev/null
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT

prefix=$tmp/prefix
# Everything below runs from a directory outside the trees.
cd "$tmp"

# --- install ---------------------------------------------------------------
cmake --install "$build" --prefix "$prefix" >"$tmp/install.log" 2>&1 ||
  { cat "$tmp/install.log"; fail "cmake --install failed"; }
say "installed into $prefix (libdir $libdir)"

# --- layout ----------------------------------------------------------------
lib=$prefix/$libdir
bad=0
need() { [ -e "$1" ] || { say "  missing: ${1#"$prefix"/}"; bad=1; }; }
for f in bin/ticketingd bin/ticketctl include/ticketing.h share/doc/ticketing/LICENSE; do
  need "$prefix/$f"
done
[ -x "$build/ticketing-bench" ] && need "$prefix/bin/ticketing-bench"
for f in libticketing.so libticketing.so.2 libticketing.a pkgconfig/ticketing.pc \
  cmake/ticketing/ticketingConfig.cmake cmake/ticketing/ticketingConfigVersion.cmake \
  cmake/ticketing/ticketingTargets.cmake cmake/ticketing/ticketingStaticTargets.cmake; do
  need "$lib/$f"
done
[ -f "$src/client/completion/ticketctl.bash" ] &&
  need "$prefix/share/bash-completion/completions/ticketctl"
[ -f "$src/client/completion/_ticketctl" ] && need "$prefix/share/zsh/site-functions/_ticketctl"
if [ ! -L "$lib/libticketing.so" ] || [ ! -L "$lib/libticketing.so.2" ]; then
  say "  libticketing.so and libticketing.so.2 are not symbolic links"
  bad=1
fi
soname=$(readelf -d "$lib/libticketing.so" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
[ "$soname" = libticketing.so.2 ] || { say "  SONAME is '$soname', not libticketing.so.2"; bad=1; }
others=$(nm -D --defined-only "$lib/libticketing.so" | awk '{print $3}' | grep -v '^tk_client_' || true)
[ -z "$others" ] || { say "  libticketing.so exports more than tk_client_*: $others"; bad=1; }
internal=$(find "$prefix" -name 'libtk_*' -o -name '*.o' | head -5)
[ -z "$internal" ] || { say "  internal files installed: $internal"; bad=1; }
[ $bad = 0 ] || fail "the installed layout is incomplete"
# The Runtime component (what the container image takes): the programs, the
# LICENSE and the completions, nothing for building against libticketing.
cmake --install "$build" --prefix "$tmp/runtime" --component Runtime >>"$tmp/install.log" 2>&1 ||
  { cat "$tmp/install.log"; fail "cmake --install --component Runtime failed"; }
runtime_ok='^\./(bin/(ticketingd|ticketctl|ticketing-bench)|share/doc/ticketing/LICENSE'
runtime_ok+='|share/bash-completion/completions/ticketctl|share/zsh/site-functions/_ticketctl)$'
extra=$(cd "$tmp/runtime" && find . -type f | { grep -vE "$runtime_ok" || true; })
[ -z "$extra" ] || fail "the Runtime component installs more than the programs: $extra"
if [ ! -x "$tmp/runtime/bin/ticketingd" ] || [ ! -x "$tmp/runtime/bin/ticketctl" ]; then
  fail "the Runtime component lacks ticketingd or ticketctl"
fi
say "layout ok"

# --- build the consumer from the prefix only ---------------------------------
consumer=$src/tests/integ/install_consumer.c
cp "$consumer" "$tmp/consumer.c"
export PKG_CONFIG_PATH=$lib/pkgconfig
pc_version=$(pkg-config --modversion ticketing) || fail "pkg-config does not find ticketing.pc"
# pkg-config words are split on purpose.
# shellcheck disable=SC2046
cc "${san[@]}" -o "$tmp/consumer_shared" "$tmp/consumer.c" $(pkg-config --cflags --libs ticketing) ||
  fail "cc with pkg-config --cflags --libs ticketing failed"
# -l:libticketing.a picks the archive where libticketing.so lies next to it.
static_libs=$(pkg-config --static --libs ticketing)
static_libs=${static_libs//-lticketing/-l:libticketing.a}
# shellcheck disable=SC2046,SC2086
cc "${san[@]}" -o "$tmp/consumer_static" "$tmp/consumer.c" $(pkg-config --cflags ticketing) \
  $static_libs || fail "cc with pkg-config --static --libs ticketing ($static_libs) failed"
if readelf -d "$tmp/consumer_static" | grep -q 'NEEDED.*libticketing'; then
  fail "the static build still needs libticketing.so"
fi
say "pkg-config $pc_version: shared and static builds ok ($static_libs)"

mkdir -p "$tmp/cmake-consumer"
cp "$tmp/consumer.c" "$tmp/cmake-consumer/consumer.c"
cat >"$tmp/cmake-consumer/CMakeLists.txt" <<'CMAKE'
cmake_minimum_required(VERSION 3.20)
project(consumer LANGUAGES C)
find_package(ticketing 0.9 REQUIRED COMPONENTS static)
add_executable(consumer_shared consumer.c)
target_link_libraries(consumer_shared PRIVATE ticketing::ticketing)
add_executable(consumer_static consumer.c)
target_link_libraries(consumer_static PRIVATE ticketing::ticketing_static)
CMAKE
if ! cmake -S "$tmp/cmake-consumer" -B "$tmp/cmake-build" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_C_FLAGS="${san[*]}" >"$tmp/cmake-consumer.log" 2>&1 ||
  ! cmake --build "$tmp/cmake-build" >>"$tmp/cmake-consumer.log" 2>&1; then
  cat "$tmp/cmake-consumer.log"
  fail "the find_package(ticketing) project did not build"
fi
if readelf -d "$tmp/cmake-build/consumer_static" | grep -q 'NEEDED.*libticketing'; then
  fail "ticketing::ticketing_static links libticketing.so"
fi
readelf -d "$tmp/cmake-build/consumer_shared" | grep -q 'NEEDED.*libticketing.so.2' ||
  fail "ticketing::ticketing does not link libticketing.so.2"
say "find_package(ticketing): shared and static builds ok"

# --- the installed server ------------------------------------------------------
# Ports are picked below the usual ephemeral range (32768 and up), where
# outgoing connections cannot be holding them, and locked against the other
# tests (tests/support/ports.sh); a bind can still lose a race to some
# other program,
# so ticketingd is retried on other ports.
# shellcheck source=tests/support/ports.sh
source "$src/tests/support/ports.sh"
(umask 077 && head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$tmp/client.secret")
export TICKETING_SECRET_FILE=$tmp/client.secret
up=no
for attempt in 1 2 3 4 5; do
  reserve_ports 3 || fail "no three free consecutive ports"
  port=$PORT
  "$prefix/bin/ticketingd" --bind 127.0.0.1 --port "$port" --peer-port $((port + 1)) \
    --admin-port $((port + 2)) --threads 1 --client-secret-file "$tmp/client.secret" \
    >"$tmp/ticketingd.log" 2>&1 &
  tk_pid=$!
  export TICKETING_ADDR=127.0.0.1:$port
  for _ in $(seq 100); do
    kill -0 "$tk_pid" 2>/dev/null || break
    if LD_LIBRARY_PATH=$lib "$prefix/bin/ticketctl" ping --timeout 1s >/dev/null 2>&1; then
      up=yes
      break
    fi
    sleep 0.1
  done
  [ $up = yes ] && break
  if kill -0 "$tk_pid" 2>/dev/null; then
    cat "$tmp/ticketingd.log"
    fail "the installed ticketingd runs but does not answer"
  fi
  wait "$tk_pid" 2>/dev/null || true
  tk_pid=""
  say "ticketingd did not start on port $port (attempt $attempt): $(tail -1 "$tmp/ticketingd.log")"
done
[ $up = yes ] || { cat "$tmp/ticketingd.log"; fail "the installed ticketingd did not start"; }
say "installed ticketingd answers on 127.0.0.1:$port"

# --- run the consumers ---------------------------------------------------------
n=0
for prog in "$tmp/consumer_shared" "$tmp/consumer_static" \
  "$tmp/cmake-build/consumer_shared" "$tmp/cmake-build/consumer_static"; do
  n=$((n + 1))
  LD_LIBRARY_PATH=$lib timeout 60 "$prog" "install/key-$n" ||
    { tail -5 "$tmp/ticketingd.log"; fail "${prog#"$tmp"/} failed"; }
done
say "PASS"
