# The Java client (clients/java), for include() from tests/CMakeLists.txt.
# Both tests build with the JDK alone (javac, jar; no Maven) and exit 77 -
# a skip - when it is missing; clients_java also skips without Debian's
# junit5 package (/usr/share/java/junit-platform-console-standalone.jar).
#
# clients_java: the JUnit 5 suite against real ticketingd processes
# (standalone, a 3-node cluster whose leader is killed, TLS, PostgreSQL for
# the fencing example when it is installed), built in ${CMAKE_BINARY_DIR}/java.
add_test(NAME clients_java
  COMMAND bash ${CMAKE_SOURCE_DIR}/clients/java/ctest.sh ${CMAKE_BINARY_DIR})
set_tests_properties(clients_java PROPERTIES LABELS clients SKIP_RETURN_CODE 77 TIMEOUT 150)

# conformance_java: every scenario of tests/conformance/scenarios.json with
# the Java driver (docs/testing.md, "Client conformance"), built in
# ${CMAKE_BINARY_DIR}/java-conformance.
add_test(NAME conformance_java
  COMMAND bash ${CMAKE_SOURCE_DIR}/clients/java/conformance.sh ${CMAKE_BINARY_DIR})
set_tests_properties(conformance_java PROPERTIES LABELS clients SKIP_RETURN_CODE 77 TIMEOUT 600)
