# The Node.js client (clients/node), included from tests/CMakeLists.txt:
#   include(${CMAKE_SOURCE_DIR}/clients/node/ctest.cmake)
# clients_node runs its tests (node --test) against real ticketingd
# processes of this build (standalone, a 3-node cluster whose leader is
# killed, TLS, a fault proxy, PostgreSQL for the fencing example when one is
# installed); conformance_node runs the scenarios of tests/conformance with
# its driver. Both skip (exit 77) when no Node.js 20 or later is installed.
set(TK_NODE_CLIENT_DIR ${CMAKE_CURRENT_LIST_DIR})
add_test(NAME clients_node COMMAND bash ${TK_NODE_CLIENT_DIR}/ctest.sh ${CMAKE_BINARY_DIR})
set_tests_properties(clients_node PROPERTIES LABELS clients SKIP_RETURN_CODE 77 TIMEOUT 150)
add_test(NAME conformance_node
  COMMAND bash ${TK_NODE_CLIENT_DIR}/ctest.sh ${CMAKE_BINARY_DIR} conformance)
set_tests_properties(conformance_node PROPERTIES LABELS clients SKIP_RETURN_CODE 77 TIMEOUT 600)
